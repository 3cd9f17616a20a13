package foreign

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// After Shutdown, what libraries held was freed with their scopes: their
// frees are refused, PyTorch's form and CuPy's (no size), and the device
// opens again on the next call.
func TestCallsAfterShutdown(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "16777216")
	ptr, err := Alloc(0, 0, 1000, 0)
	require.NoError(t, err)
	cupy, err := Alloc(0, 0, 2000, 0)
	require.NoError(t, err)
	require.NoError(t, Shutdown())
	require.ErrorIs(t, Free(0, ptr, 1000, 0), gpu.ErrNoDevice)
	require.ErrorContains(t, Free(-1, ptr, 1000, 0), "is no live allocation of this library")
	require.ErrorIs(t, Free(0, cupy, -1, 0), gpu.ErrNoDevice, "CuPy's free, which gives no size")
	again, err := Alloc(0, 0, 1000, 0)
	require.NoError(t, err)
	require.NoError(t, Free(0, again, 1000, 0))
	require.NoError(t, Shutdown())
}

// Shutdown while threads allocate: every call returns, with memory or an
// error; none waits forever on the root scope that ended.
func TestShutdownUnderAllocations(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "16777216")
	var started, done sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			for i := 0; ; i++ {
				if i == 100 {
					started.Done()
				}
				select {
				case <-stop:
					return
				default:
				}
				if ptr, err := Alloc(0, 0, 512, 0); err == nil {
					_ = Free(0, ptr, 512, 0) // refused where Shutdown freed it first
				}
			}
		}()
	}
	started.Wait()
	require.NoError(t, Shutdown())
	close(stop)
	done.Wait()
	require.NoError(t, Shutdown())
}
