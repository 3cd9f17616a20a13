//go:build cuda

package cuda_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gorgonia.org/cu"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/cuda"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m))
}

func open(t testing.TB) *cuda.Driver {
	t.Helper()
	d, err := cuda.Open(0)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Close()) })
	return d
}

func TestOpenBadOrdinal(t *testing.T) {
	n, err := cuda.Count()
	require.NoError(t, err)
	_, err = cuda.Open(n)
	assert.ErrorIs(t, err, errdefs.NoDevice)
	_, err = cuda.Open(-1)
	assert.ErrorIs(t, err, errdefs.NoDevice)
}

func TestErrorsKeepTheCUDAResult(t *testing.T) {
	d := open(t)
	_, err := d.Alloc(1 << 50)
	require.Error(t, err)
	var ce *cuda.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "cuMemAlloc", ce.Op)
	assert.Equal(t, 2, ce.Result, "CUDA_ERROR_OUT_OF_MEMORY")
	assert.True(t, errdefs.IsSourceOutOfMemory(err))
	assert.ErrorIs(t, err, cu.OutOfMemory, "cu's own error is kept")

	assert.Error(t, d.Free(12345, 1), "freeing an address that is not an allocation")
	assert.Error(t, d.CopyHtoD(0, []byte{1}, 0), "a copy to address 0")
	assert.Error(t, d.CopyHtoD(0, []byte{1}, 777), "an unknown stream")
	_, err = d.EventDone(999)
	assert.Error(t, err)
}

func TestHandlesMapAndUnmap(t *testing.T) {
	d := open(t)
	g := d.Granularity()
	assert.Equal(t, int64(2<<20), g, "the H200's granularity")
	va, err := d.ReserveAddress(8 * g)
	require.NoError(t, err)
	h1, err := d.Create(g)
	require.NoError(t, err)
	h2, err := d.Create(2 * g)
	require.NoError(t, err)
	_, err = d.Create(g + 1)
	assert.Error(t, err, "a size that is not whole granules")
	require.NoError(t, d.Map(va+uintptr(g), g, h1))
	require.NoError(t, d.Map(va+uintptr(2*g), 2*g, h2))
	require.NoError(t, d.SetAccess(va+uintptr(g), 3*g), "one access call over two mappings")
	data := make([]byte, 3*g)
	for i := range data {
		data[i] = byte(i)
	}
	require.NoError(t, d.CopyHtoD(va+uintptr(g), data, 0))
	back := make([]byte, 3*g)
	require.NoError(t, d.CopyDtoH(back, va+uintptr(g), 0))
	assert.Equal(t, data, back)
	// The handle moves: map h2 at a second address, unmap the first, and
	// find its bytes there.
	require.NoError(t, d.Map(va+uintptr(5*g), 2*g, h2))
	require.NoError(t, d.SetAccess(va+uintptr(5*g), 2*g))
	require.NoError(t, d.Unmap(va+uintptr(2*g), 2*g))
	require.NoError(t, d.CopyDtoH(back[:2*g], va+uintptr(5*g), 0))
	assert.Equal(t, data[g:], back[:2*g])
	require.NoError(t, d.Unmap(va+uintptr(5*g), 2*g))
	require.NoError(t, d.Unmap(va+uintptr(g), g))
	require.NoError(t, d.Release(h1))
	require.NoError(t, d.Release(h2))
	require.NoError(t, d.ReleaseAddress(va, 8*g))
}

func TestStreamsAndEvents(t *testing.T) {
	d := open(t)
	s, err := d.NewStream()
	require.NoError(t, err)
	p, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	require.NoError(t, d.Memset(p, 9, 1<<20, s))
	ev, err := d.RecordEvent(s)
	require.NoError(t, err)
	require.NoError(t, d.WaitEvent(ev))
	done, err := d.EventDone(ev)
	require.NoError(t, err)
	assert.True(t, done)
	require.NoError(t, d.DestroyEvent(ev))
	got := make([]byte, 1)
	require.NoError(t, d.CopyDtoH(got, p+12345, s))
	assert.Equal(t, byte(9), got[0])
	require.NoError(t, d.Synchronize(s))
	require.NoError(t, d.DestroyStream(s))
	require.NoError(t, d.Free(p, 1<<20))
}

// TestPoolOnTheGPU runs the caching pool on real memory: allocations of
// many sizes, written and read back, memory moved under a limit, then
// everything returned.
func TestPoolOnTheGPU(t *testing.T) {
	d := open(t)
	free0, _, err := d.MemInfo()
	require.NoError(t, err)
	p, err := pool.New(d, pool.MaxReserved(300<<20), pool.GrowthStep(0))
	require.NoError(t, err)
	require.True(t, p.Expandable())
	var live []pool.Block
	// The order lays the large blocks out as 100 MiB, 17 MiB, 64 MiB, 3 MiB,
	// 190 MiB reserved in all: freeing the first and the third leaves no
	// free run of 150 MiB, and the limit leaves no room for 150 MiB more, so
	// the 150 MiB below needs the memory of both moved to the arena's end.
	for i, n := range []int64{1, 512, 4096, 1 << 20, 100 << 20, 17 << 20, 64 << 20, 3 << 20, 5000} {
		b, err := p.Alloc(n)
		require.NoError(t, err)
		require.NoError(t, d.Memset(b.Ptr(), byte(i+1), n, 0))
		live = append(live, b)
	}
	for i, b := range live {
		got := make([]byte, 1)
		require.NoError(t, d.CopyDtoH(got, b.Ptr()+uintptr(b.Size()-1), 0))
		assert.Equal(t, byte(i+1), got[0], "block %d kept its bytes", i)
	}
	reserved := p.Stats().Reserved
	require.NoError(t, p.Free(live[4]))
	require.NoError(t, p.Free(live[6]))
	big, err := p.Alloc(150 << 20)
	require.NoError(t, err)
	require.NoError(t, d.Memset(big.Ptr(), 1, 150<<20, 0))
	assert.Positive(t, p.Stats().PagesMoved, "memory moved from the freed blocks")
	assert.Less(t, p.Stats().Reserved, reserved+150<<20, "instead of all new ones")
	for _, i := range []int{5, 7} {
		got := make([]byte, 1)
		require.NoError(t, d.CopyDtoH(got, live[i].Ptr(), 0))
		assert.Equal(t, byte(i+1), got[0], "a live block between them kept its bytes")
	}
	for _, i := range []int{0, 1, 2, 3, 5, 7, 8} {
		require.NoError(t, p.Free(live[i]))
	}
	require.NoError(t, p.Free(big))
	st := p.Stats()
	t.Logf("stats: %+v", st)
	require.NoError(t, p.Close())
	free1, _, err := d.MemInfo()
	require.NoError(t, err)
	assert.InDelta(t, free0, free1, 64<<20, "the memory went back to the driver")
}

var sizes = []int64{256, 1 << 20, 64 << 20}

// BenchmarkAllocFree compares a cached allocation and free through gpuscope
// with the driver's own calls, at the sizes of docs/benchmarks.md.
func BenchmarkAllocFree(b *testing.B) {
	gpu.RecordStacks(false) // TestMain records stacks; these measure without
	defer gpu.RecordStacks(true)
	for _, n := range sizes {
		name := units.FormatBytes(n)
		b.Run(fmt.Sprintf("gpuscope-scope/size=%s", name), func(b *testing.B) {
			dev, err := gpu.Open(0)
			require.NoError(b, err)
			defer dev.Close()
			s, err := dev.NewScope()
			require.NoError(b, err)
			defer s.Close()
			b.ReportAllocs()
			for b.Loop() {
				x, err := s.Alloc(n)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Free(x); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("gpuscope-pool/size=%s", name), func(b *testing.B) {
			d := open(b)
			p, err := pool.New(d)
			require.NoError(b, err)
			defer p.Close()
			b.ReportAllocs()
			for b.Loop() {
				x, err := p.Alloc(n)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Free(x); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("cuMemAlloc/size=%s", name), func(b *testing.B) {
			d := open(b)
			err := d.Do(func() error {
				for b.Loop() {
					p, err := cu.MemAlloc(n)
					if err != nil {
						return err
					}
					if err := cu.MemFree(p); err != nil {
						return err
					}
				}
				return nil
			})
			require.NoError(b, err)
		})
		b.Run(fmt.Sprintf("cuMemAllocAsync/size=%s", name), func(b *testing.B) {
			d := open(b)
			err := d.Do(func() error {
				if err := cuda.KeepAsyncPool(0); err != nil {
					return err
				}
				for b.Loop() {
					p, err := cuda.AllocAsync(n)
					if err != nil {
						return err
					}
					if err := cuda.FreeAsync(p); err != nil {
						return err
					}
				}
				return errors.Join(cu.Synchronize())
			})
			require.NoError(b, err)
		})
	}
}

// TestScopesOnTheGPU is a short version of the semantics, for
// compute-sanitizer runs of this binary.
func TestScopesOnTheGPU(t *testing.T) {
	dev, err := gpu.Open(0)
	require.NoError(t, err)
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := gpu.Alloc[int32](s, 1000)
		if err != nil {
			return err
		}
		return x.Memset(0)
	})
	require.NoError(t, err)
	assert.Zero(t, dev.Stats().Allocated)
}

// BenchmarkDriverCalls times each kind of driver call the pool makes, one
// at a time, through this package (its cgo and context switch included):
// the cost table of internal/sim is checked against it. Only the named call is
// timed; what sets it up and undoes it is not.
func BenchmarkDriverCalls(b *testing.B) {
	d := open(b)
	g := d.Granularity()
	sizes := []int64{2 << 20, 20 << 20, 64 << 20, 512 << 20}
	va, err := d.ReserveAddress(1 << 30)
	require.NoError(b, err)
	defer func() { require.NoError(b, d.ReleaseAddress(va, 1<<30)) }()
	b.Run("reserve_address", func(b *testing.B) {
		for b.Loop() {
			p, err := d.ReserveAddress(256 << 30)
			b.StopTimer()
			require.NoError(b, err)
			require.NoError(b, d.ReleaseAddress(p, 256<<30))
			b.StartTimer()
		}
	})
	for _, n := range sizes {
		benchHandleCalls(b, d, va, n)
	}
	benchCreateAfterRelease(b, d, []int64{2 << 20, 20 << 20, 64 << 20, 256 << 20, 512 << 20, 2 << 30})
	// Creates from several goroutines at once: if the driver serializes
	// them, time per create does not fall as -cpu rises.
	b.Run("create_parallel/size=20.00 MiB", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				h, err := d.Create(10 * g)
				if err == nil {
					err = d.Release(h)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("record_event", func(b *testing.B) {
		for b.Loop() {
			ev, err := d.RecordEvent(0)
			b.StopTimer()
			require.NoError(b, err)
			require.NoError(b, d.DestroyEvent(ev))
			b.StartTimer()
		}
	})
	ev, err := d.RecordEvent(0)
	require.NoError(b, err)
	require.NoError(b, d.WaitEvent(ev))
	b.Run("event_query", func(b *testing.B) {
		for b.Loop() {
			_, err := d.EventDone(ev)
			require.NoError(b, err)
		}
	})
	b.Run("wait_event", func(b *testing.B) {
		for b.Loop() {
			require.NoError(b, d.WaitEvent(ev))
		}
	})
	require.NoError(b, d.DestroyEvent(ev))
	b.Run("destroy_event", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			ev, err := d.RecordEvent(0)
			require.NoError(b, err)
			b.StartTimer()
			require.NoError(b, d.DestroyEvent(ev))
		}
	})
}

// benchHandleCalls times create, release, map, set_access and unmap of one
// handle of n bytes, mapped at va. Each timed create follows the release of
// the create before it.
func benchHandleCalls(b *testing.B, d *cuda.Driver, va uintptr, n int64) {
	name := units.FormatBytes(n)
	b.Run("create/size="+name, func(b *testing.B) {
		for b.Loop() {
			h, err := d.Create(n)
			b.StopTimer()
			require.NoError(b, err)
			require.NoError(b, d.Release(h))
			b.StartTimer()
		}
	})
	b.Run("release/size="+name, func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			h, err := d.Create(n)
			require.NoError(b, err)
			b.StartTimer()
			require.NoError(b, d.Release(h))
		}
	})
	h, err := d.Create(n)
	require.NoError(b, err)
	b.Run("map/size="+name, func(b *testing.B) {
		for b.Loop() {
			require.NoError(b, d.Map(va, n, h))
			b.StopTimer()
			require.NoError(b, d.Unmap(va, n))
			b.StartTimer()
		}
	})
	b.Run("set_access/size="+name, func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			require.NoError(b, d.Map(va, n, h))
			b.StartTimer()
			require.NoError(b, d.SetAccess(va, n))
			b.StopTimer()
			require.NoError(b, d.Unmap(va, n))
			b.StartTimer()
		}
	})
	b.Run("unmap/size="+name, func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			require.NoError(b, d.Map(va, n, h))
			require.NoError(b, d.SetAccess(va, n))
			b.StartTimer()
			require.NoError(b, d.Unmap(va, n))
		}
	})
	require.NoError(b, d.Release(h))
}

// benchCreateAfterRelease times a create of 2 MiB right after the release
// of one handle of each size (size= names the size released), and after no
// release (size=none). The driver finishes a release's work lazily and the
// next create waits for it: the difference from size=none is that wait,
// which sim.PriceCreateAfterRelease models. Only the 2 MiB create is timed.
// Each iteration first creates a 2 MiB handle it holds, untimed, which takes
// the wait of the iteration before's releases, so that the timed create
// waits for the one release of its size alone.
func benchCreateAfterRelease(b *testing.B, d *cuda.Driver, sizes []int64) {
	const small = 2 << 20
	for _, n := range append([]int64{0}, sizes...) {
		name := "none"
		if n > 0 {
			name = units.FormatBytes(n)
		}
		b.Run("create_after_release/size="+name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				held, err := d.Create(small)
				require.NoError(b, err)
				if n > 0 {
					big, err := d.Create(n)
					require.NoError(b, err)
					require.NoError(b, d.Release(big))
				}
				b.StartTimer()
				h, err := d.Create(small)
				b.StopTimer()
				require.NoError(b, err)
				require.NoError(b, d.Release(h))
				require.NoError(b, d.Release(held))
				b.StartTimer()
			}
		})
	}
}
