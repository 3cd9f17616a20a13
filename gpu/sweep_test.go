package gpu_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

var longSweep = flag.Bool("sweep.long", false, "TestFaultSweep fails every call of each kind the workload makes, not one in three")

// sweepCapacity is the device of the sweep's workload: room for the
// cache's model and the work, not for a large request beside them.
const sweepCapacity = 16 << 20

// sweepWorkload is what a user's program does with a device: an evictable
// cache with stream work, a scope that grows, streams, events, page-locked
// memory with asynchronous copies, a reservation, a block freed while
// another stream used it, and a request that evicts the cache. Every
// error a call returns goes to fail; the cache is closed at the end, and
// the device's cache emptied.
func sweepWorkload(dev *gpu.Device, fail func(string, error) bool) {
	cache, err := dev.NewScope(gpu.Evictable(0), gpu.Name("cache"))
	fail("NewScope(cache)", err)
	if err == nil {
		defer func() { fail("cache.Close", cache.Close()) }()
		if st, err := cache.NewStream(); fail("cache.NewStream", err) {
			if w, err := gpu.Alloc[float32](cache, 512<<10); fail("cache Alloc", err) {
				fail("cache Memset", w.CopyFromHost(make([]float32, 512<<10)))
				if h, err := gpu.AllocHost[float32](cache, 1024); fail("cache AllocHost", err) {
					fail("cache copy", w.CopyFromHostAsync(h, st))
				}
				fail("cache Synchronize", st.Synchronize()) // idle from here: the large request evicts it
			}
		}
	}
	fail("WithScope(work)", gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		if !fail("NewStream", err) {
			return nil
		}
		x, err := gpu.Alloc[float32](s, 1<<20) // grows the pool
		if !fail("Alloc", err) {
			return nil
		}
		h, err := gpu.AllocHost[float32](s, 1<<20)
		if fail("AllocHost", err) {
			fail("Use", h.Use(func(v []float32) error { v[0] = 1; return nil }))
			fail("CopyFromHostAsync", x.CopyFromHostAsync(h, st))
			fail("HostSlice.Free", h.Free()) // pending on st's work
		}
		if ev, err := st.Record(); fail("Record", err) {
			fail("Wait", ev.Wait())
			_, err := ev.Done()
			fail("Done", err)
		}
		if h2, err := gpu.AllocHost[float32](s, 1<<20); fail("AllocHost again", err) { // reaps the first
			fail("HostSlice.Free again", h2.Free())
		}
		if b, err := s.Alloc(1 << 20); fail("Alloc b", err) {
			fail("RecordUse", b.RecordUse(st))
			fail("Free b", s.Free(b)) // held for st's work
		}
		if ev, err := st.Record(); fail("Record again", err) {
			_, err := ev.Done()
			fail("Done again", err)
		}
		fail("Synchronize", st.Synchronize())
		fail("WithScope(reserved)", gpu.WithScope(s.Context(), dev, func(r *gpu.Scope) error {
			_, err := r.Alloc(1 << 20)
			return err
		}, gpu.Reserve(2<<20)))
		return nil
	}))
	fail("WithScope(large)", gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(15 << 20) // evicts the cache, where it is idle
		return err
	}))
	fail("EmptyCache", dev.EmptyCache())
}

// checkEmpty asserts that the device holds nothing: no stream, event or
// page-locked block, no memory, and Stats that say so.
func checkEmpty(t *testing.T, dev *gpu.Device, faults *gputest.Faults, when string) {
	t.Helper()
	streams, events, pinned := faults.Handles()
	assert.Zero(t, streams, "%s: streams left", when)
	assert.Zero(t, events, "%s: events left", when)
	assert.Zero(t, pinned, "%s: page-locked blocks left", when)
	assert.Zero(t, faults.Used(), "%s: memory left", when)
	st := dev.Stats()
	assert.Zero(t, st.Allocated, when)
	assert.Zero(t, st.Reserved, when)
	assert.Zero(t, st.PinnedAllocated+st.PinnedCached+st.PinnedPending, "%s: page-locked memory the Stats count", when)
	assert.Zero(t, st.OpenScopes, when)
}

// sweepRun runs the workload on a new faulty device with inject set up
// on it, and checks what a failure may leave: only injected errors (or
// out of memory, or the eviction of the cache) surface, and after
// EmptyCache and Close nothing stays live and Close returns nil.
func sweepRun(t *testing.T, inject func(*gputest.Faults)) (ran gpu.Stats) {
	t.Helper()
	var mu sync.Mutex
	var errs []string
	check := func(what string, err error) bool {
		if err == nil {
			return true
		}
		if !errors.Is(err, gputest.ErrInjected) && !errors.Is(err, gpu.ErrOutOfMemory) && !errors.Is(err, gpu.ErrEvicted) {
			mu.Lock()
			errs = append(errs, fmt.Sprintf("%s: %v", what, err))
			mu.Unlock()
		}
		return false
	}
	dev, faults, err := gputest.OpenFaulty(sweepCapacity, gpu.OnReleaseError(func(err error) { check("dropped", err) }))
	require.NoError(t, err)
	inject(faults)
	sweepWorkload(dev, check)
	ran = dev.Stats()
	faults.FailWhen(nil)
	for op := gputest.OpAlloc; op <= gputest.OpRequest; op++ {
		faults.FailNth(op, 0)
	}
	assert.Empty(t, errs, "only injected failures surface")
	assert.NoError(t, dev.EmptyCache(), "what failed to go back goes now")
	checkEmpty(t, dev, faults, "after EmptyCache")
	assert.NoError(t, dev.Close())
	checkEmpty(t, dev, faults, "after Close")
	return ran
}

// callsOf counts the driver calls of each Op a clean run of the workload
// makes.
func callsOf(t *testing.T) map[gputest.Op]int {
	var mu sync.Mutex
	most := map[gputest.Op]int{}
	ran := sweepRun(t, func(f *gputest.Faults) {
		f.FailWhen(func(c gputest.Call) bool {
			mu.Lock()
			defer mu.Unlock()
			most[c.Op] = max(most[c.Op], c.N)
			return false
		})
	})
	assert.Equal(t, int64(1), ran.Evictions, "the clean run evicts the cache")
	assert.Positive(t, ran.PinnedHits+ran.PinnedMisses)
	return most
}

// TestFaultSweep fails, for every kind of driver call, the nth call for
// each n a clean run of the workload reaches, and checks that nothing is
// lost. It takes the first three calls of each kind, every third and the
// last, and all of them under -sweep.long (go test ./gpu -run
// TestFaultSweep -sweep.long): the whole sweep is twice as long.
func TestFaultSweep(t *testing.T) {
	calls := callsOf(t)
	require.NotEmpty(t, calls)
	for op := gputest.OpAlloc; op <= gputest.OpRequest; op++ {
		for n := 1; n <= calls[op]; n++ {
			if !*longSweep && n > 3 && n%3 != 0 && n != calls[op] {
				continue
			}
			t.Run(fmt.Sprintf("%v call %d of %d", op, n, calls[op]), func(t *testing.T) {
				sweepRun(t, func(f *gputest.Faults) { f.FailNth(op, n) })
			})
		}
	}
}

// A release that fails keeps what it failed to release: each of these
// driver calls fails once, the first time the workload makes it, and
// the device still ends empty, what failed tried again by EmptyCache.
func TestAFailedReleaseKeepsWhatItFailedToRelease(t *testing.T) {
	for _, method := range []string{"HostFree", "DestroyEvent", "DestroyStream", "Free", "Release", "Unmap", "ReleaseAddress"} {
		for _, nth := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s, call %d", method, nth), func(t *testing.T) {
				sweepRun(t, func(f *gputest.Faults) {
					seen := 0
					f.FailWhen(func(c gputest.Call) bool {
						if c.Method != method {
							return false
						}
						seen++
						return seen == nth
					})
				})
			})
		}
	}
}
