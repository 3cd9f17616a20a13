package gpu_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

func TestWaitForMemoryQueuesInsteadOfFailing(t *testing.T) {
	const chunk = 10 << 20
	dev := openHost(t, gpu.HostMemory(10*chunk)) // room for 10 at a time
	var holding, most atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				b, err := s.Alloc(chunk)
				if err != nil {
					return err
				}
				n := holding.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				for range 10 {
					runtime.Gosched() // hold it a while
				}
				holding.Add(-1)
				return s.Free(b)
			}, gpu.WaitForMemory())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "every request waited for memory instead of failing")
	}
	assert.LessOrEqual(t, most.Load(), int32(10), "never more than the device holds")
}

func TestWaitForMemoryEndsWithTheContext(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(16<<20))
	err := gpu.WithScope(context.Background(), dev, func(hog *gpu.Scope) error {
		_, err := hog.Alloc(12 << 20) // held throughout
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err = gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(12 << 20)
			return err
		}, gpu.WaitForMemory())
		assert.ErrorIs(t, err, context.DeadlineExceeded, "it waited until the context ended, then said why")
		return nil
	})
	require.NoError(t, err)
}

func TestWaitForMemoryAppliesToChildrenAndLimits(t *testing.T) {
	dev := openHost(t)
	err := gpu.WithScope(context.Background(), dev, func(parent *gpu.Scope) error {
		held, err := parent.Alloc(3 << 10)
		require.NoError(t, err)
		done := make(chan error)
		go func() {
			done <- gpu.WithScope(parent.Context(), dev, func(child *gpu.Scope) error {
				_, err := child.Alloc(2 << 10) // past the parent's limit until held is freed
				return err
			})
		}()
		runtime.Gosched()
		require.NoError(t, parent.Free(held))
		return <-done
	}, gpu.Limit(4<<10), gpu.WaitForMemory())
	require.NoError(t, err, "the child waited for its parent's limit to make room")
}

// A request that can never fit, larger than the device, the pool's cap or
// an enclosing Limit, fails at once with the out-of-memory error: no
// release could make room for it, so waiting would only hide the cause.
func TestWaitForMemoryRefusesAtOnceWhatCanNeverFit(t *testing.T) {
	cases := []struct {
		name  string
		opts  []gpu.DeviceOption
		limit int64
		size  int64
		cause string
	}{
		{"larger than the device", nil, 0, 100 << 20, "the request is larger than the device"},
		{"larger than the cap", []gpu.DeviceOption{gpu.MaxReserved(16 << 20)}, 0, 32 << 20, "the pool's cap of 16.00 MiB, which holds whole pages of 2.00 MiB, refused"},
		{"larger than an enclosing Limit", nil, 8 << 20, 32 << 20, `the limit of scope "outer" (8.00 MiB) refused`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			attempts := 0
			dev := openHost(t, append(c.opts, gpu.HostMemory(64<<20), gpu.OnOutOfMemory(func(error) { attempts++ }))...)
			// Before the fix the wait never ended: the deadline bounds the
			// test, and the error then would be the context's alone.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var opts []gpu.ScopeOption
			if c.limit > 0 {
				opts = append(opts, gpu.Limit(c.limit))
			}
			err := gpu.WithScope(ctx, dev, func(outer *gpu.Scope) error {
				return gpu.WithScope(outer.Context(), dev, func(s *gpu.Scope) error {
					_, err := s.Alloc(c.size)
					return err
				}, gpu.WaitForMemory())
			}, append(opts, gpu.Name("outer"))...)
			require.ErrorIs(t, err, gpu.ErrOutOfMemory)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "it did not wait")
			assert.Contains(t, err.Error(), c.cause)
			assert.Equal(t, 1, attempts, "one attempt, no wait")
		})
	}
}

// A wait that ends with its context says so in gpu's words: the scope, the
// size, and both causes, the context's and the want of memory.
func TestAWaitThatEndsWithItsContextNamesTheScopeAndTheSize(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	giveUp := errors.New("the client went away")
	dev := openHost(t, gpu.HostMemory(16<<20), gpu.OnOutOfMemory(func(error) { cancel(giveUp) }))
	err := gpu.WithScope(context.Background(), dev, func(hog *gpu.Scope) error {
		_, err := hog.Alloc(12 << 20)
		require.NoError(t, err)
		return gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(12 << 20)
			return err
		}, gpu.WaitForMemory(), gpu.Name("request"))
	})
	require.ErrorIs(t, err, giveUp, "the context's cause")
	require.ErrorIs(t, err, gpu.ErrOutOfMemory, "and the want of memory")
	var oom *gpu.OOMError
	require.ErrorAs(t, err, &oom, "the last attempt's figures")
	assert.Equal(t, "request", oom.Scope)
	assert.Equal(t, `gpu: out of memory: scope "request" gave up waiting for 12.00 MiB: the client went away`, err.Error())
}

// TestAWaitingAllocationCountsOneOutOfMemoryAtMost plays a waiter that
// fails three attempts before a release makes room, and one that gives
// up: Stats.OOMs counts allocations, so the first adds none and the
// second one, however many attempts each made.
func TestAWaitingAllocationCountsOneOutOfMemoryAtMost(t *testing.T) {
	const piece = 4 << 20
	attempts := make(chan struct{}, 16)
	dev := openHost(t, gpu.HostMemory(4*piece), gpu.OnOutOfMemory(func(error) { attempts <- struct{}{} }))
	err := gpu.WithScope(context.Background(), dev, func(hog *gpu.Scope) error {
		var held []gpu.Buffer
		for range 4 {
			b, err := hog.Alloc(piece)
			require.NoError(t, err)
			held = append(held, b)
		}
		done := make(chan error, 1)
		go func() {
			done <- gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				_, err := s.Alloc(3 * piece)
				return err
			}, gpu.WaitForMemory())
		}()
		for i := range 3 { // each release but the third leaves too little
			<-attempts
			require.NoError(t, hog.Free(held[i]))
		}
		require.NoError(t, <-done, "the third release made room")
		assert.Zero(t, dev.Stats().OOMs, "a wait served it after three failed attempts: no out-of-memory")

		_, err := hog.Alloc(3 * piece) // the waiter's memory, back in the cache: the device is full again
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for range 3 {
				<-attempts
				require.NoError(t, dev.EmptyCache()) // wakes it to fail again
			}
			cancel()
		}()
		err = gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(piece)
			return err
		}, gpu.WaitForMemory())
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, int64(1), dev.Stats().OOMs, "one allocation gave up: one out-of-memory, not one an attempt")
		return nil
	})
	require.NoError(t, err)
}
