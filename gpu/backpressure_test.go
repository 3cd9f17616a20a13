package gpu_test

import (
	"context"
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
