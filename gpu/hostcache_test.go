package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// addrOf returns the address of h's memory.
func addrOf[T gpu.Elem](t testing.TB, h gpu.HostSlice[T]) uintptr {
	t.Helper()
	var p uintptr
	require.NoError(t, h.Use(func(v []T) error { p = uintptr(unsafe.Pointer(&v[0])); return nil }))
	return p
}

// fill sets every element of h to v.
func fill[T gpu.Elem](t testing.TB, h gpu.HostSlice[T], v T) {
	t.Helper()
	require.NoError(t, h.Use(func(s []T) error {
		for i := range s {
			s[i] = v
		}
		return nil
	}))
}

// pinnedStats are the Pinned fields of a device's Stats.
type pinnedStats struct {
	Allocated, ActiveBlocks, Cached, CachedBlocks, Pending int64
	Hits, Misses, DriverFrees                              int64
}

func pinnedOf(dev *gpu.Device) pinnedStats {
	s := dev.Stats()
	return pinnedStats{s.PinnedAllocated, s.PinnedActiveBlocks, s.PinnedCached, s.PinnedCachedBlocks, s.PinnedPending,
		s.PinnedHits, s.PinnedMisses, s.PinnedDriverFrees}
}

// inBothStackModes runs fn with stacks recorded, as TestMain sets, and
// without: a scope that records stacks owns page-locked memory through
// OwnResource each time, one that does not takes back the record its last
// Free left (scope.Owned.Reown).
func inBothStackModes(t *testing.T, fn func(t *testing.T)) {
	for _, on := range []bool{true, false} {
		name := "stacks recorded"
		if !on {
			name = "stacks not recorded"
		}
		t.Run(name, func(t *testing.T) {
			gpu.RecordStacks(on)
			defer gpu.RecordStacks(true)
			fn(t)
		})
	}
}

// pinnedHandles counts the page-locked allocations drv holds.
func pinnedHandles(drv *gputest.Faults) int {
	_, _, pinned := drv.Handles()
	return pinned
}

// copyRig makes in s a stream, a device Slice and a HostSlice, of n
// elements each, for asynchronous copies between them.
func copyRig[T gpu.Elem](t testing.TB, s *gpu.Scope, n int) (*gpu.Stream, gpu.Slice[T], gpu.HostSlice[T]) {
	t.Helper()
	st, err := s.NewStream()
	require.NoError(t, err)
	x, err := gpu.Alloc[T](s, n)
	require.NoError(t, err)
	h, err := gpu.AllocHost[T](s, n)
	require.NoError(t, err)
	return st, x, h
}

func TestPinnedMemoryIsReusedOnlyOnceTheCopiesQueuedOnItHaveRun(t *testing.T) {
	dev, drv := openTestHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, x, h := copyRig[int32](t, s, 1024)
		first := addrOf(t, h)
		fill(t, h, 1)
		release, err := drv.Hold(st)
		require.NoError(t, err)
		require.NoError(t, x.CopyFromHostAsync(h, st), "queued behind the hold")
		require.NoError(t, h.Free())

		again, err := gpu.AllocHost[int32](s, 1024)
		require.NoError(t, err)
		assert.NotEqual(t, first, addrOf(t, again), "the copy from the first block has not run")
		fill(t, again, 2)
		assert.Equal(t, 2, pinnedHandles(drv))
		assert.Equal(t, int64(4096), pinnedOf(dev).Pending)

		release()
		require.NoError(t, st.Synchronize())
		got := make([]int32, 1024)
		require.NoError(t, x.CopyToHost(got))
		assert.Equal(t, int32(1), got[0], "the copy read the first block's own bytes")
		assert.Equal(t, int32(1), got[1023])

		third, err := gpu.AllocHost[int32](s, 1024)
		require.NoError(t, err)
		assert.Equal(t, first, addrOf(t, third), "its copy has run: the block is reused")
		st2 := pinnedOf(dev)
		assert.Zero(t, st2.Pending)
		assert.Equal(t, int64(1), st2.Hits)
		assert.Equal(t, int64(2), st2.Misses)
		_, events, _ := drv.Handles()
		assert.Zero(t, events, "the block's event was destroyed when it was reused")
		return nil
	}))
}

func TestAStaleHostSliceNeverReachesTheBlocksNextOwner(t *testing.T) {
	inBothStackModes(t, func(t *testing.T) {
		dev := openHost(t)
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			h, err := gpu.AllocHost[byte](s, 100)
			require.NoError(t, err)
			first := addrOf(t, h)
			require.NoError(t, h.Free())
			require.NoError(t, h.Free(), "Free is idempotent")
			next, err := gpu.AllocHost[byte](s, 100)
			require.NoError(t, err)
			require.Equal(t, first, addrOf(t, next), "the block was reused")
			fill(t, next, 7)
			assert.ErrorIs(t, h.Use(func(v []byte) error { v[0] = 9; return nil }), gpu.ErrScopeClosed)
			x, err := gpu.Alloc[byte](s, 100)
			require.NoError(t, err)
			st, err := s.NewStream()
			require.NoError(t, err)
			assert.ErrorIs(t, x.CopyToHostAsync(h, st), gpu.ErrScopeClosed)
			require.NoError(t, next.Use(func(v []byte) error {
				assert.Equal(t, byte(7), v[0], "the stale handle wrote nothing")
				return nil
			}))
			return nil
		}))
		var zero gpu.HostSlice[byte]
		assert.ErrorIs(t, zero.Free(), gpu.ErrWrongScope)
	})
}

func TestAScopesEndReturnsItsPinnedBlocksToTheCache(t *testing.T) {
	inBothStackModes(t, func(t *testing.T) {
		dev, drv := openTestHost(t)
		var addrs []uintptr
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			st, err := s.NewStream()
			require.NoError(t, err)
			x, err := gpu.Alloc[byte](s, 1<<16)
			require.NoError(t, err)
			for range 3 {
				h, err := gpu.AllocHost[byte](s, 1<<16)
				require.NoError(t, err)
				require.NoError(t, x.CopyFromHostAsync(h, st))
				addrs = append(addrs, addrOf(t, h))
			}
			return nil
		}))
		st := pinnedOf(dev)
		assert.Zero(t, st.Allocated)
		assert.Zero(t, st.ActiveBlocks)
		assert.Equal(t, int64(3<<16), st.Cached, "kept, not freed")
		assert.Equal(t, 3, pinnedHandles(drv))

		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			for range 3 {
				h, err := gpu.AllocHost[byte](s, 1<<16)
				require.NoError(t, err)
				assert.Contains(t, addrs, addrOf(t, h))
			}
			return nil
		}))
		st = pinnedOf(dev)
		assert.Equal(t, int64(3), st.Hits, "the next scope's blocks came from the cache")
		assert.Equal(t, int64(3), st.Misses)
		assert.Equal(t, 3, pinnedHandles(drv), "no driver call")
	})
}

func TestEmptyCacheGivesPinnedMemoryBack(t *testing.T) {
	t.Run("blocks no stream uses go back at once", func(t *testing.T) {
		dev, drv := openTestHost(t)
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			for _, n := range []int{10, 5000, 1 << 20} {
				_, err := gpu.AllocHost[byte](s, n)
				require.NoError(t, err)
			}
			return nil
		}))
		require.Equal(t, 3, pinnedHandles(drv))
		require.NoError(t, dev.EmptyCache())
		assert.Zero(t, pinnedHandles(drv))
		st := pinnedOf(dev)
		assert.Zero(t, st.Cached)
		assert.Zero(t, st.CachedBlocks)
		assert.Equal(t, int64(3), st.DriverFrees)
	})
	t.Run("a block a copy still uses goes back once the copy has run", func(t *testing.T) {
		dev, drv := openTestHost(t)
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			st, x, h := copyRig[byte](t, s, 4096)
			release, err := drv.Hold(st)
			require.NoError(t, err)
			require.NoError(t, x.CopyFromHostAsync(h, st))
			require.NoError(t, h.Free())
			require.NoError(t, dev.EmptyCache())
			assert.Equal(t, 1, pinnedHandles(drv), "its copy is queued")
			assert.Equal(t, int64(4096), pinnedOf(dev).Pending)

			release()
			require.NoError(t, st.Synchronize())
			next, err := gpu.AllocHost[byte](s, 4096)
			require.NoError(t, err)
			assert.Equal(t, 1, pinnedHandles(drv), "the first went back as the second was allocated")
			require.NoError(t, next.Free())
			return nil
		}))
		st := pinnedOf(dev)
		assert.Zero(t, st.Hits, "an emptied block is not reused")
		assert.Equal(t, int64(1), st.DriverFrees)
		assert.Equal(t, int64(4096), st.Cached, "the second, kept")
	})
	t.Run("Close waits for the copies and gives everything back", func(t *testing.T) {
		dev, drv, err := gputest.OpenFaulty(0)
		require.NoError(t, err)
		s, err := dev.NewScope()
		require.NoError(t, err)
		st, x, h := copyRig[byte](t, s, 4096)
		require.NoError(t, x.CopyFromHostAsync(h, st))
		_, err = gpu.AllocHost[byte](s, 1<<20)
		require.NoError(t, err, "live at Close")
		require.NoError(t, s.Close())
		require.NoError(t, dev.Close())
		assert.Zero(t, pinnedHandles(drv))
		_, events, _ := drv.Handles()
		assert.Zero(t, events)
		assert.Zero(t, pinnedOf(dev).Cached)
	})
}

func TestPinnedStatsCountWhatTheCacheDoes(t *testing.T) {
	inBothStackModes(t, func(t *testing.T) {
		dev := openHost(t)
		s, err := dev.NewScope()
		require.NoError(t, err)
		defer func() { assert.NoError(t, s.Close()) }()
		a, err := gpu.AllocHost[byte](s, 5000)
		require.NoError(t, err)
		b, err := gpu.AllocHost[float64](s, 1)
		require.NoError(t, err)
		st := pinnedOf(dev)
		assert.Equal(t, pinnedStats{Allocated: 5120 + 4096, ActiveBlocks: 2, Misses: 2}, st)
		require.NoError(t, a.Free())
		require.NoError(t, b.Free())
		st = pinnedOf(dev)
		assert.Equal(t, pinnedStats{Cached: 5120 + 4096, CachedBlocks: 2, Misses: 2}, st)
		_, err = gpu.AllocHost[byte](s, 4200)
		require.NoError(t, err, "the 5 KiB class")
		st = pinnedOf(dev)
		assert.Equal(t, pinnedStats{Allocated: 5120, ActiveBlocks: 1, Cached: 4096, CachedBlocks: 1, Hits: 1, Misses: 2}, st)
		assert.Equal(t, int64(5120), dev.Stats().PinnedAllocated)
	})
}

func TestPinnedSizeClassesWasteUnderAFifth(t *testing.T) {
	for _, c := range []struct {
		size, rounded int64
		class         int
	}{
		{1, 4096, 0}, {4096, 4096, 0}, {4097, 5120, 1}, {6144, 6144, 2}, {8192, 8192, 4},
		{8193, 10240, 5}, {1 << 20, 1 << 20, 32}, {1<<20 + 1, 5 << 18, 33}, {1 << 62, 1 << 62, 200},
		{1<<62 + 1, 1<<62 + 1, -1},
	} {
		class, rounded := gpu.HostClass(c.size)
		assert.Equal(t, c.class, class, "class of %d", c.size)
		assert.Equal(t, c.rounded, rounded, "size of %d's class", c.size)
	}
	prev := int64(0)
	for size := int64(4097); size < 1<<24; size += 997 {
		class, rounded := gpu.HostClass(size)
		require.GreaterOrEqual(t, rounded, size)
		require.Less(t, float64(rounded-size)/float64(rounded), 0.2, "%d bytes", size)
		c2, r2 := gpu.HostClass(rounded)
		require.Equal(t, class, c2, "a class's size is in the class")
		require.Equal(t, rounded, r2)
		require.GreaterOrEqual(t, rounded, prev, "classes grow with the size")
		prev = rounded
	}
}

func TestPinnedMemoryUnderManyGoroutines(t *testing.T) {
	inBothStackModes(t, func(t *testing.T) {
		dev := openHost(t)
		const workers, rounds = 8, 50
		var wg sync.WaitGroup
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			for w := range workers {
				wg.Go(func() {
					st, err := s.NewStream()
					if !assert.NoError(t, err) {
						return
					}
					x, err := gpu.Alloc[int32](s, 4096)
					if !assert.NoError(t, err) {
						return
					}
					for r := range rounds {
						n := 1000 + (w*rounds+r)%3*1000
						h, err := gpu.AllocHost[int32](s, n)
						if !assert.NoError(t, err) {
							return
						}
						assert.NoError(t, h.Use(func(v []int32) error { v[0] = int32(w); return nil }))
						assert.NoError(t, x.CopyFromHostAsync(h, st))
						assert.NoError(t, h.Free())
					}
					assert.NoError(t, st.Synchronize())
				})
			}
			wg.Wait()
			// Every stream has synchronized: whichever blocks the rounds
			// left pending (copies still queued when the next round
			// asked), a block of a size the rounds used is free for
			// reuse now. The rounds alone may see no hit on a loaded
			// machine, so the hit is asked for here.
			before := pinnedOf(dev).Hits
			h, err := gpu.AllocHost[int32](s, 1000)
			require.NoError(t, err)
			require.NoError(t, h.Free())
			assert.Equal(t, before+1, pinnedOf(dev).Hits, "a cached block serves the allocation once its copies have run")
			return nil
		}))
		st := pinnedOf(dev)
		assert.Equal(t, int64(workers*rounds+1), st.Hits+st.Misses)
		assert.Zero(t, st.Allocated)
		assert.Zero(t, st.ActiveBlocks)
		require.NoError(t, dev.EmptyCache())
		assert.Zero(t, pinnedOf(dev).Cached, "every copy has run: nothing is pending")
	})
}

// pinnedSizes are the sizes the pinned benchmarks measure.
var pinnedSizes = []struct {
	name string
	size int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"16MiB", 16 << 20}, {"64MiB", 64 << 20}}

// BenchmarkAllocHostFree is an AllocHost and its Free, of bytes, on the
// test device (a GPU in a build with CUDA support), the cache serving
// every one: the driver's first allocation comes before the timer.
func BenchmarkAllocHostFree(b *testing.B) {
	gpu.RecordStacks(false) // TestMain records stacks; this measures without
	defer gpu.RecordStacks(true)
	for _, sz := range pinnedSizes {
		b.Run(sz.name, func(b *testing.B) {
			dev := testDevice(b, 0)
			s, err := dev.NewScope()
			require.NoError(b, err)
			defer s.Close()
			// The first AllocHost asks the driver; the loop measures the
			// cache, as the peers' figures do.
			h, err := gpu.AllocHost[byte](s, sz.size)
			require.NoError(b, err)
			require.NoError(b, h.Free())
			b.ReportAllocs()
			for b.Loop() {
				h, err := gpu.AllocHost[byte](s, sz.size)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Free(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// pinnedTotal is what the pipeline benchmarks move, in chunks.
const pinnedTotal = 64 << 20

// eachChunk runs fn as a sub-benchmark per chunk size, with a scope of the
// test device and pinnedTotal bytes of ordinary memory to move.
func eachChunk(b *testing.B, fn func(b *testing.B, dev *gpu.Device, s *gpu.Scope, src []byte, chunk int)) {
	gpu.RecordStacks(false)
	defer gpu.RecordStacks(true)
	src := make([]byte, pinnedTotal)
	for i := range src {
		src[i] = byte(i)
	}
	for _, chunk := range []int{1 << 20, 4 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("chunk=%dMiB", chunk>>20), func(b *testing.B) {
			dev := testDevice(b, 0)
			s, err := dev.NewScope()
			require.NoError(b, err)
			defer s.Close()
			fn(b, dev, s, src, chunk)
		})
	}
}

// BenchmarkPinnedStaging moves 64 MiB of ordinary memory to the device
// through page-locked staging buffers of a chunk's size, as a data loader
// does: per chunk, AllocHost, a copy into it, an asynchronous copy to the
// device, Free; then one wait for the stream. A buffer is reused once its
// copy has run.
func BenchmarkPinnedStaging(b *testing.B) {
	eachChunk(b, func(b *testing.B, dev *gpu.Device, s *gpu.Scope, src []byte, chunk int) {
		st, err := s.NewStream()
		require.NoError(b, err)
		x, err := gpu.Alloc[byte](s, pinnedTotal)
		require.NoError(b, err)
		// One pass before the timer fills the cache, as the peers'
		// harness does; misses/op shows whether the loop still asks the
		// driver.
		require.NoError(b, stage(s, st, x, src, chunk))
		before := dev.Stats().PinnedMisses
		b.SetBytes(pinnedTotal)
		b.ReportAllocs()
		for b.Loop() {
			if err := stage(s, st, x, src, chunk); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(dev.Stats().PinnedMisses-before)/float64(b.N), "misses/op")
	})
}

// BenchmarkPinnedFill is the host half of BenchmarkPinnedStaging: 64 MiB
// copied into page-locked chunks, each allocated and freed, with no copy
// to the device. Against the staging figure it tells the cost of filling
// the buffers from that of the transfers.
func BenchmarkPinnedFill(b *testing.B) {
	eachChunk(b, func(b *testing.B, _ *gpu.Device, s *gpu.Scope, src []byte, chunk int) {
		fill := func() error {
			for off := 0; off < len(src); off += chunk {
				h, err := filled(s, src, off, chunk)
				if err != nil {
					return err
				}
				if err := h.Free(); err != nil {
					return err
				}
			}
			return nil
		}
		require.NoError(b, fill())
		b.SetBytes(pinnedTotal)
		b.ReportAllocs()
		for b.Loop() {
			if err := fill(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// filled returns page-locked memory holding chunk bytes of src from off.
func filled(s *gpu.Scope, src []byte, off, chunk int) (gpu.HostSlice[byte], error) {
	h, err := gpu.AllocHost[byte](s, chunk)
	if err != nil {
		return h, err
	}
	if err := h.Use(func(v []byte) error { copy(v, src[off:]); return nil }); err != nil {
		return h, errors.Join(err, h.Free())
	}
	return h, nil
}

// stage copies src to x through page-locked chunks and waits for st.
func stage(s *gpu.Scope, st *gpu.Stream, x gpu.Slice[byte], src []byte, chunk int) error {
	for off := 0; off < len(src); off += chunk {
		h, err := filled(s, src, off, chunk)
		if err != nil {
			return err
		}
		dst, err := x.View(off, off+chunk)
		if err != nil {
			return err
		}
		if err := dst.CopyFromHostAsync(h, st); err != nil {
			return err
		}
		if err := h.Free(); err != nil {
			return err
		}
	}
	return st.Synchronize()
}

func TestPinnedMemoryWhoseStreamWorkCannotBeFollowedGoesToTheDriver(t *testing.T) {
	t.Run("an event that cannot be recorded", func(t *testing.T) {
		dev, drv := openTestHost(t)
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			st, x, h := copyRig[byte](t, s, 4096)
			require.NoError(t, x.CopyFromHostAsync(h, st))
			drv.FailNth(gputest.OpEvent, 1)
			assert.ErrorIs(t, h.Free(), gputest.ErrInjected)
			assert.Zero(t, pinnedHandles(drv), "freed through the driver, which waits for the copy")
			assert.Equal(t, pinnedStats{Misses: 1, DriverFrees: 1}, pinnedOf(dev))
			return nil
		}))
	})
	t.Run("an event that cannot be queried", func(t *testing.T) {
		var dropped []error
		dev, drv := openTestHost(t, gpu.OnReleaseError(func(err error) { dropped = append(dropped, err) }))
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			st, x, h := copyRig[byte](t, s, 4096)
			require.NoError(t, x.CopyFromHostAsync(h, st))
			require.NoError(t, h.Free())
			drv.FailNth(gputest.OpEvent, 1)
			next, err := gpu.AllocHost[byte](s, 4096)
			require.NoError(t, err, "the next allocation does not fail for it")
			require.NoError(t, next.Free())
			return nil
		}))
		require.Len(t, dropped, 1)
		assert.ErrorIs(t, dropped[0], gputest.ErrInjected)
		st := pinnedOf(dev)
		assert.Equal(t, int64(1), st.DriverFrees, "the block whose event failed")
		assert.Zero(t, st.Hits, "and was not reused")
	})
}

// Frees of a HostSlice's copies racing its scope's end give the block back
// exactly once: one of them holds its record in the scope, the others only
// end their uses. A second give-back would list the block twice.
func TestFreesRacingTheScopesEndGiveTheBlockBackOnce(t *testing.T) {
	inBothStackModes(t, func(t *testing.T) {
		dev := openHost(t)
		for range 1000 {
			s, err := dev.NewScope()
			require.NoError(t, err)
			h, err := gpu.AllocHost[byte](s, 100)
			require.NoError(t, err)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 2 {
				wg.Go(func() { <-start; assert.NoError(t, h.Free()) })
			}
			wg.Go(func() { <-start; assert.NoError(t, s.Close()) })
			close(start)
			wg.Wait()
			assert.ErrorIs(t, h.Use(func([]byte) error { return nil }), gpu.ErrScopeClosed)
			st := pinnedOf(dev)
			require.Zero(t, st.ActiveBlocks, "every block is back")
			require.Equal(t, int64(1), st.CachedBlocks, "the one block, once")
		}
	})
}

// AllocHost and Free in a loop while the scope ends: the scope's records
// are taken back without its lock, and still every block comes back once
// and no HostSlice outlives the scope.
func TestAllocHostFreeLoopsRacingTheScopesEndLoseNothing(t *testing.T) {
	inBothStackModes(t, func(t *testing.T) {
		dev := openHost(t)
		for range 200 {
			s, err := dev.NewScope()
			require.NoError(t, err)
			var wg sync.WaitGroup
			var kept []gpu.HostSlice[byte]
			wg.Go(func() {
				for {
					h, err := gpu.AllocHost[byte](s, 100)
					if err != nil {
						assert.ErrorIs(t, err, gpu.ErrScopeClosed)
						return
					}
					kept = append(kept, h)
					if len(kept)%3 != 0 {
						assert.NoError(t, h.Free())
					}
				}
			})
			require.NoError(t, s.Close())
			wg.Wait()
			for _, h := range kept {
				assert.ErrorIs(t, h.Use(func([]byte) error { return nil }), gpu.ErrScopeClosed)
			}
			st := pinnedOf(dev)
			require.Zero(t, st.ActiveBlocks, "every block is back")
			require.Zero(t, st.Allocated)
		}
	})
}
