package pool_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/pool/sim"
)

func newPool(t *testing.T, src pool.Source, opts ...pool.Option) *pool.Pool {
	t.Helper()
	p, err := pool.New(src, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close(), "a second Close is a no-op") })
	return p
}

func TestBadSizesAreRefused(t *testing.T) {
	p := newPool(t, sim.New(0, 0))
	for _, n := range []int64{0, -1, math.MinInt64, pool.MaxSize + 1, math.MaxInt64} {
		_, err := p.Alloc(n)
		assert.ErrorIs(t, err, pool.ErrInvalidSize, "size %d", n)
	}
	assert.Zero(t, p.Stats().Reserved, "a refused size reserves nothing")
}

func TestBadFreesChangeNothing(t *testing.T) {
	p := newPool(t, sim.New(0, 0), pool.Shards(1)) // one shard: the freed block is the one found next
	other := newPool(t, sim.New(0, 0))
	b, err := p.Alloc(100)
	require.NoError(t, err)
	ob, err := other.Alloc(100)
	require.NoError(t, err)

	assert.ErrorIs(t, p.Free(pool.Block{}), pool.ErrInvalidBlock, "the zero Block")
	assert.True(t, pool.Block{}.IsZero())
	assert.False(t, b.IsZero())
	assert.ErrorIs(t, p.Free(ob), pool.ErrInvalidBlock, "a block of another pool")
	require.NoError(t, p.Free(b))
	assert.ErrorIs(t, p.Free(b), pool.ErrInvalidBlock, "a double free")

	again, err := p.Alloc(100)
	require.NoError(t, err)
	assert.Equal(t, b.Ptr(), again.Ptr(), "the cache serves the same block")
	assert.ErrorIs(t, p.Free(b), pool.ErrInvalidBlock, "a stale handle to a reused block")
	assert.Equal(t, int64(1), p.Stats().ActiveBlocks, "the stale free must not free the new owner's block")
	require.NoError(t, p.Free(again))
	require.NoError(t, other.Free(ob))
}

func TestOptionsAreChecked(t *testing.T) {
	src := sim.New(0, 0)
	for name, opt := range map[string]pool.Option{
		"negative limit":             pool.MaxReserved(-1),
		"fraction above one":         pool.MaxReservedFraction(1.5),
		"negative release threshold": pool.ReleaseThreshold(-1),
		"tiny max split":             pool.MaxSplitSize(1 << 20),
		"unknown expansion":          pool.Expand(9),
		"no shards":                  pool.Shards(0),
		"nil":                        nil,
	} {
		_, err := pool.New(src, opt)
		assert.Error(t, err, name)
	}
	_, err := pool.New(src, pool.MaxSplitSize(64<<20))
	assert.Error(t, err, "MaxSplitSize means nothing for expandable arenas")
	_, err = pool.New(src.Plain(), pool.Expand(pool.ExpandAlways))
	assert.Error(t, err, "ExpandAlways needs a page mapper")
	_, err = pool.New(nil)
	assert.Error(t, err)
}

func TestOutOfMemoryReleasesTheCacheRetriesThenReports(t *testing.T) {
	for name, plain := range map[string]bool{"expandable": false, "classic": true} {
		t.Run(name, func(t *testing.T) {
			src := sim.New(64<<20, 0)
			var s pool.Source = src
			if plain {
				s = src.Plain()
			}
			p := newPool(t, s)
			a, err := p.Alloc(30 << 20)
			require.NoError(t, err)
			pinSize := int64(2 << 20) // after a in the same expandable arena
			if plain {
				pinSize = 512 // in a small segment of its own
			}
			pin, err := p.Alloc(pinSize)
			require.NoError(t, err)
			require.NoError(t, p.Free(a))
			// 50 MiB fits only once the cached 30 MiB are reused: moved
			// pages, or a released segment and a retry.
			b, err := p.Alloc(50 << 20)
			require.NoError(t, err)
			assert.Positive(t, p.Stats().Retries+p.Stats().PagesMoved, "the cache had to be reused")
			require.NoError(t, p.Free(pin))

			_, err = p.Alloc(40 << 20)
			require.ErrorIs(t, err, pool.ErrOutOfMemory)
			var oom *pool.OOMError
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, int64(40<<20), oom.Requested)
			assert.Equal(t, int64(64<<20), oom.DeviceTotal)
			assert.GreaterOrEqual(t, oom.Allocated, int64(50<<20))
			assert.ErrorIs(t, err, sim.ErrOutOfMemory, "the source's own error is kept")
			assert.Contains(t, err.Error(), "tried to allocate 40.00 MiB")
			assert.Equal(t, int64(1), p.Stats().OOMs)
			require.NoError(t, p.Free(b))
		})
	}
}

func TestLimitIsNeverExceeded(t *testing.T) {
	src := sim.New(1<<30, 0)
	p := newPool(t, src, pool.MaxReservedFraction(0.25))
	assert.Equal(t, int64(256<<20), p.MaxReserved())
	b, err := p.Alloc(200 << 20)
	require.NoError(t, err)
	_, err = p.Alloc(100 << 20)
	var oom *pool.OOMError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, int64(256<<20), oom.Limit)
	assert.LessOrEqual(t, p.Stats().PeakReserved, int64(256<<20))
	require.NoError(t, p.Free(b))
}

func TestEmptyCacheReturnsEverythingUnused(t *testing.T) {
	for name, plain := range map[string]bool{"expandable": false, "classic": true} {
		t.Run(name, func(t *testing.T) {
			src := sim.New(0, 0)
			var s pool.Source = src
			if plain {
				s = src.Plain()
			}
			p := newPool(t, s)
			keep, err := p.Alloc(1 << 20)
			require.NoError(t, err)
			for _, n := range []int64{512, 3 << 20, 40 << 20} {
				b, err := p.Alloc(n)
				require.NoError(t, err)
				require.NoError(t, p.Free(b))
			}
			require.NoError(t, p.EmptyCache())
			require.NoError(t, p.CheckTrimmed())
			st := p.Stats()
			assert.LessOrEqual(t, st.Reserved, int64(20<<20), "only what holds the live block stays")
			assert.Equal(t, st.Reserved, src.Used())
			require.NoError(t, p.Free(keep))
			require.NoError(t, p.EmptyCache())
			assert.Zero(t, p.Stats().Reserved)
			assert.Zero(t, src.Used())
		})
	}
}

func TestReleaseThresholdBoundsTheCache(t *testing.T) {
	src := sim.New(0, 0)
	p := newPool(t, src.Plain(), pool.ReleaseThreshold(0))
	b, err := p.Alloc(30 << 20)
	require.NoError(t, err)
	require.NoError(t, p.Free(b))
	assert.Zero(t, p.Stats().Reserved)
	assert.Equal(t, int64(1), p.Stats().SourceFrees)
}

func TestStreams(t *testing.T) {
	// Each device holds one page, so every reuse is forced and visible.
	const a, b = uintptr(1), uintptr(2)
	const page = sim.DefaultPageSize
	t.Run("a block is reused at once on its own stream", func(t *testing.T) {
		src := sim.New(page, 0)
		p := newPool(t, src)
		x, err := p.AllocOn(page, a)
		require.NoError(t, err)
		require.NoError(t, p.Free(x))
		y, err := p.AllocOn(page, a)
		require.NoError(t, err, "only x's memory exists")
		assert.Equal(t, x.Ptr(), y.Ptr())
		assert.Zero(t, src.Counts().EventsRecorded, "no event on the hot path")
		require.NoError(t, p.Free(y))
	})
	t.Run("a block another stream used waits for that stream's event", func(t *testing.T) {
		src := sim.New(page, 0)
		p := newPool(t, src)
		x, err := p.AllocOn(page, a)
		require.NoError(t, err)
		require.NoError(t, p.RecordUse(x, b))
		src.SetBusy(b, true)
		require.NoError(t, p.Free(x))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = p.AllocContext(ctx, page, a)
		require.ErrorIs(t, err, pool.ErrOutOfMemory, "stream b may still read x, and the caller would not wait")
		require.ErrorIs(t, err, context.Canceled)
		assert.Zero(t, src.Counts().EventsWaited)
		src.SetBusy(b, false)
		z, err := p.AllocOn(page, a)
		require.NoError(t, err, "once b's event completed x is reused")
		assert.Equal(t, x.Ptr(), z.Ptr())
		require.NoError(t, p.Free(z))
	})
	t.Run("out of memory, the pool waits for the blocks other streams hold", func(t *testing.T) {
		src := sim.New(page, 0)
		p := newPool(t, src)
		x, err := p.AllocOn(page, a)
		require.NoError(t, err)
		require.NoError(t, p.RecordUse(x, b))
		src.SetBusy(b, true)
		require.NoError(t, p.Free(x))
		y, err := p.AllocOn(page, a)
		require.NoError(t, err, "as PyTorch does, it synchronizes before it fails")
		assert.Positive(t, src.Counts().EventsWaited)
		assert.Equal(t, x.Ptr(), y.Ptr())
		require.NoError(t, p.Free(y))
	})
	t.Run("EmptyCache returns the blocks other streams held", func(t *testing.T) {
		src := sim.New(0, 0)
		p := newPool(t, src)
		x, err := p.AllocOn(32<<20, a)
		require.NoError(t, err)
		require.NoError(t, p.RecordUse(x, b))
		src.SetBusy(b, true)
		require.NoError(t, p.Free(x))
		require.NoError(t, p.EmptyCache())
		assert.Zero(t, p.Stats().Reserved)
		assert.Zero(t, src.Used())
	})
	t.Run("a stream that cannot be waited for keeps only its own memory", func(t *testing.T) {
		src := sim.New(0, 0)
		p := newPool(t, src, pool.GrowthStep(0))
		x, err := p.AllocOn(32<<20, a)
		require.NoError(t, err)
		y, err := p.AllocOn(32<<20, b)
		require.NoError(t, err)
		require.NoError(t, p.Free(x))
		require.NoError(t, p.Free(y))
		src.Break(b)
		err = p.EmptyCache()
		require.Error(t, err, "stream b's memory cannot be proven idle")
		assert.Contains(t, err.Error(), "stream 0x2")
		assert.Equal(t, int64(32<<20), p.Stats().Reserved, "stream a's memory went back; b's is kept")
		src.Repair(b)
		require.NoError(t, p.Close(), "once b can be waited for again, all of it goes back")
		assert.Zero(t, src.Used())
	})
	t.Run("another stream gets a cached block only after an event on its stream", func(t *testing.T) {
		src := sim.New(page, 0)
		p := newPool(t, src)
		x, err := p.AllocOn(page, a)
		require.NoError(t, err)
		require.NoError(t, p.Free(x))
		y, err := p.AllocOn(page, b)
		require.NoError(t, err)
		assert.Positive(t, src.Counts().EventsWaited, "the pool waited for stream a's work first")
		require.NoError(t, p.Free(y))
	})
	t.Run("RecordUse without events is an error", func(t *testing.T) {
		p := newPool(t, plainNoEvents{sim.New(0, 0)})
		x, err := p.Alloc(64)
		require.NoError(t, err)
		assert.Error(t, p.RecordUse(x, b))
		require.NoError(t, p.Free(x))
	})
}

// plainNoEvents is a source with neither pages nor events.
type plainNoEvents struct{ s *sim.Source }

func (p plainNoEvents) Alloc(n int64) (uintptr, error)  { return p.s.Alloc(n) }
func (p plainNoEvents) Free(ptr uintptr, n int64) error { return p.s.Free(ptr, n) }
func (p plainNoEvents) MemInfo() (int64, int64, error)  { return p.s.MemInfo() }

func TestClosedPool(t *testing.T) {
	src := sim.New(0, 0)
	p, err := pool.New(src)
	require.NoError(t, err)
	b, err := p.Alloc(64)
	require.NoError(t, err)
	err = p.Close()
	require.Error(t, err, "closing with a live block is reported")
	assert.Contains(t, err.Error(), "1 blocks")
	_, err = p.Alloc(64)
	assert.ErrorIs(t, err, pool.ErrClosed)
	require.NoError(t, p.Free(b), "a block freed after Close is released")
	assert.Zero(t, p.Stats().Reserved)
	assert.NoError(t, p.Close(), "Close is idempotent")
}

func TestSourceErrorsThatAreNotOOMPassThrough(t *testing.T) {
	boom := errors.New("device lost")
	p := newPool(t, failingSource{err: boom})
	_, err := p.Alloc(64)
	assert.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, pool.ErrOutOfMemory)
}

type failingSource struct{ err error }

func (f failingSource) Alloc(int64) (uintptr, error)   { return 0, f.err }
func (f failingSource) Free(uintptr, int64) error      { return f.err }
func (f failingSource) MemInfo() (int64, int64, error) { return 1 << 30, 1 << 30, nil }

func TestSizesRoundToHalfKiB(t *testing.T) {
	assert.Equal(t, int64(512), pool.Rounded(1))
	assert.Equal(t, int64(1024), pool.Rounded(513))
	assert.Equal(t, int64(1<<20), pool.Rounded(1<<20))
}

func TestRegionSubAllocatesAndCoalesces(t *testing.T) {
	r, err := pool.NewRegion(1<<20, 4096)
	require.NoError(t, err)
	a, na, ok := r.Alloc(1000)
	require.True(t, ok)
	assert.Equal(t, int64(1024), na)
	b, _, ok := r.Alloc(3072)
	require.True(t, ok)
	assert.Equal(t, a+1024, b)
	_, _, ok = r.Alloc(1)
	assert.False(t, ok, "the region is full")
	require.NoError(t, r.Free(a))
	assert.Error(t, r.Free(a), "double free")
	require.NoError(t, r.Free(b))
	c, _, ok := r.Alloc(4096)
	require.True(t, ok, "freed neighbours coalesce")
	assert.Equal(t, uintptr(1<<20), c)
	assert.Equal(t, int64(4096), r.Used())
	_, err = pool.NewRegion(0, -1)
	assert.ErrorIs(t, err, pool.ErrInvalidSize)
}

// stuckEvents is a source whose streams cannot be waited for while stuck.
type stuckEvents struct {
	*sim.Source
	stuck bool
}

func (s *stuckEvents) WaitEvent(ev uintptr) error {
	if s.stuck {
		return errors.New("device hung")
	}
	return s.Source.WaitEvent(ev)
}

func TestEmptyCacheKeepsMemoryItCannotProveIdle(t *testing.T) {
	src := &stuckEvents{Source: sim.New(0, 0), stuck: true}
	p := newPool(t, src)
	b, err := p.Alloc(30 << 20)
	require.NoError(t, err)
	require.NoError(t, p.Free(b))
	before := p.Stats().Reserved
	err = p.EmptyCache()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "device hung")
	assert.Equal(t, before, p.Stats().Reserved, "nothing is unmapped while the stream may still use it")
	require.NoError(t, p.CheckInvariants(nil))
	again, err := p.Alloc(30 << 20)
	require.NoError(t, err, "the memory is still there to use")
	require.NoError(t, p.Free(again))
	src.stuck = false
	require.NoError(t, p.Close(), "once the device answers, all of it goes back")
	assert.Zero(t, src.Used())
}

// memInfoFails is a source that cannot say how large it is.
type memInfoFails struct{ *sim.PlainSource }

func (memInfoFails) MemInfo() (int64, int64, error) { return 0, 0, errors.New("no memory info") }

func TestASourceWithoutMemInfoIsUsable(t *testing.T) {
	src := memInfoFails{sim.New(0, 0).Plain()}
	p := newPool(t, src)
	b, err := p.Alloc(1 << 20)
	require.NoError(t, err, "only LimitFraction needs the device's size")
	require.NoError(t, p.Free(b))
	_, err = pool.New(src, pool.MaxReservedFraction(0.5))
	assert.ErrorContains(t, err, "no memory info")
}

func TestRequestsNoDeviceHoldsAreOutOfMemory(t *testing.T) {
	for name, src := range map[string]pool.Source{
		"expandable": sim.New(64<<20, 0),
		"classic":    sim.New(64<<20, 0).Plain(),
		"unlimited":  sim.New(0, 0),
	} {
		t.Run(name, func(t *testing.T) {
			p := newPool(t, src)
			for _, n := range []int64{65 << 20, 128 << 40, pool.MaxSize} {
				if name == "unlimited" && n < 2<<40 {
					continue // the unlimited source says it holds 1 TiB
				}
				_, err := p.Alloc(n)
				require.ErrorIs(t, err, pool.ErrOutOfMemory, "%d bytes", n)
				var oom *pool.OOMError
				require.ErrorAs(t, err, &oom)
				assert.Equal(t, n, oom.Requested)
			}
			assert.Zero(t, p.Stats().Reserved)
		})
	}
}

// unaligned is a source whose allocations start 8 bytes past alignment.
type unaligned struct{ *sim.PlainSource }

func (u unaligned) Alloc(n int64) (uintptr, error) {
	p, err := u.PlainSource.Alloc(n)
	return p + 8, err
}

func (u unaligned) Free(p uintptr, n int64) error { return u.PlainSource.Free(p-8, n) }

func TestEveryBlockIsAligned(t *testing.T) {
	for name, src := range map[string]pool.Source{"expandable": sim.New(0, 0), "classic": sim.New(0, 0).Plain()} {
		t.Run(name, func(t *testing.T) {
			p := newPool(t, src)
			var live []pool.Block
			for _, n := range []int64{1, 100, 255, 256, 257, 511, 513, 4097, 1<<20 - 1, 1<<20 + 1, 3<<20 + 5} {
				for range 3 {
					b, err := p.Alloc(n)
					require.NoError(t, err)
					assert.Zero(t, b.Ptr()%pool.Alignment, "%d bytes at %#x", n, b.Ptr())
					live = append(live, b)
				}
			}
			for _, b := range live {
				require.NoError(t, p.Free(b))
			}
		})
	}
	t.Run("a source that returns unaligned memory is refused", func(t *testing.T) {
		src := sim.New(0, 0)
		p := newPool(t, unaligned{src.Plain()})
		_, err := p.Alloc(4096)
		assert.ErrorContains(t, err, "not aligned")
		allocs, _, _, _ := src.Live()
		assert.Zero(t, allocs, "the unaligned allocation went back")
	})
}

func TestPeakAllocatedIsExactForOneGoroutineAcrossGCs(t *testing.T) {
	// Few shards: after a GC the goroutine comes back to one it used.
	p := newPool(t, sim.New(0, 0), pool.Shards(2))
	gc := func() { runtime.GC(); runtime.GC() } // sync.Pool forgets in two
	for round := range 4 {
		p.ResetPeaks()
		a, err := p.Alloc(10 << 10)
		require.NoError(t, err)
		require.NoError(t, p.Free(a))
		gc()
		b, err := p.Alloc(10 << 10)
		require.NoError(t, err)
		gc()
		c, err := p.Alloc(10 << 10)
		require.NoError(t, err)
		gc()
		require.NoError(t, p.Free(b))
		require.NoError(t, p.Free(c))
		assert.Equal(t, int64(20<<10), p.Stats().PeakAllocated, "round %d: b and c were live together", round)
		assert.Equal(t, int64(2), p.Stats().PeakActiveBlocks, "round %d: two blocks at most", round)
	}
}

// FuzzOptions makes pools with arbitrary option values: New must refuse a
// bad value with an error, and a pool it makes must allocate, free and
// close cleanly.
func FuzzOptions(f *testing.F) {
	f.Add(int64(0), 0.0, int64(-1), int64(0), int64(10<<20), 0, uint8(0), false)
	f.Add(int64(64<<20), 0.5, int64(0), int64(30<<20), int64(0), 3, uint8(1), true)
	f.Add(int64(-1), 1.5, int64(4<<20), int64(1<<20), int64(-7), 2000, uint8(9), false)
	f.Fuzz(func(t *testing.T, maxReserved int64, fraction float64, threshold, maxSplit, step int64, shards int, expand uint8, plain bool) {
		var opts []pool.Option
		if maxReserved != 0 {
			opts = append(opts, pool.MaxReserved(maxReserved))
		}
		if fraction != 0 {
			opts = append(opts, pool.MaxReservedFraction(fraction))
		}
		if threshold >= 0 {
			opts = append(opts, pool.ReleaseThreshold(threshold))
		}
		if maxSplit != 0 {
			opts = append(opts, pool.MaxSplitSize(maxSplit))
		}
		if step != 10<<20 {
			opts = append(opts, pool.GrowthStep(step))
		}
		if shards != 0 {
			opts = append(opts, pool.Shards(shards))
		}
		if expand != 0 {
			opts = append(opts, pool.Expand(pool.Expansion(expand%4)))
		}
		src := sim.New(256<<20, 0)
		var s pool.Source = src
		if plain {
			s = src.Plain()
		}
		p, err := pool.New(s, opts...)
		if err != nil {
			return
		}
		var live []pool.Block
		for _, n := range []int64{1, 4096, 3 << 20, 40 << 20} {
			b, err := p.Alloc(n)
			if err != nil {
				if !errors.Is(err, pool.ErrOutOfMemory) {
					t.Fatalf("Alloc(%d): %v", n, err)
				}
				continue
			}
			live = append(live, b)
		}
		for _, b := range live {
			if err := p.Free(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.CheckInvariants(src.Accessible); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if allocs, handles, reserves, _ := src.Live(); allocs+handles+reserves != 0 {
			t.Fatalf("closed pool left %d allocations, %d handles, %d reservations", allocs, handles, reserves)
		}
	})
}

func TestTotalsAndCachedBlocksAreCounted(t *testing.T) {
	p := newPool(t, sim.New(0, 0), pool.Shards(1))
	a, err := p.Alloc(1000) // 1024 bytes
	require.NoError(t, err)
	b, err := p.Alloc(3 << 20)
	require.NoError(t, err)
	c, err := p.Alloc(100)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	require.NoError(t, p.Free(b))
	st := p.Stats()
	assert.Equal(t, int64(1024+3<<20+512), st.AllocatedBytes)
	assert.Equal(t, int64(1024+3<<20), st.FreedBytes)
	assert.Equal(t, int64(3), st.PeakActiveBlocks)
	assert.Equal(t, int64(1), st.ActiveBlocks)
	assert.Positive(t, st.CachedBlocks, "a in the front cache, b free in its arena")
	p.ResetPeaks()
	assert.Equal(t, int64(1), p.Stats().PeakActiveBlocks)
	require.NoError(t, p.Free(c))
}
