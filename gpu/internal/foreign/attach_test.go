package foreign

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// A program that hands a library a scope per request keeps a bounded set
// of records: those of ended scopes are taken back, and their ids name
// nothing.
func TestRecordsOfEndedGoScopesAreTakenBack(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(16 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	var first int64
	for i := range 3 * recordChunk {
		s, err := dev.NewScope(gpu.Name("request"))
		require.NoError(t, err)
		id, err := Attach(s)
		require.NoError(t, err)
		if i == 0 {
			first = id
		}
		ptr, err := AllocIn(id, -1, 1000, 0)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		_, err = AllocIn(id, -1, 1000, 0)
		require.ErrorIs(t, err, gpu.ErrScopeClosed, "an allocation in an ended scope")
		require.ErrorIs(t, Free(-1, ptr, 1000, 0), gpu.ErrScopeClosed, "a free after the scope freed it")
	}
	records.mu.Lock()
	used := records.used
	records.mu.Unlock()
	require.LessOrEqual(t, used, int64(2*recordChunk))
	require.Nil(t, lookup(first))
}

// A free after the device closed is refused, and so is an allocation:
// nothing crashes, nothing else changes.
func TestCallsAfterTheDeviceClosedFail(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(16 << 20))
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("ort"))
	require.NoError(t, err)
	id, err := Attach(s)
	require.NoError(t, err)
	ptr, err := AllocIn(id, -1, 1000, 0)
	require.NoError(t, err)
	require.Error(t, dev.Close(), "the device reports the scope left open")
	require.ErrorContains(t, gputest.Find(), `"ort"`, "so does gputest, once")
	require.Error(t, Free(-1, ptr, 1000, 0))
	_, err = AllocIn(id, -1, 1000, 0)
	require.Error(t, err)
	require.ErrorIs(t, RecordStream(ptr, 1), gpu.ErrFreed)
}

// After Shutdown, what libraries held was freed with their scopes: their
// frees are refused, PyTorch's form and CuPy's (no size), and the device
// opens again on the next call.
func TestCallsAfterShutdown(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "16777216")
	ptr, err := Alloc(0, 1000, 0)
	require.NoError(t, err)
	cupy, err := Alloc(0, 2000, 0)
	require.NoError(t, err)
	require.NoError(t, Shutdown())
	require.ErrorIs(t, Free(0, ptr, 1000, 0), gpu.ErrNoDevice)
	require.ErrorIs(t, Free(-1, ptr, 1000, 0), gpu.ErrFreed)
	require.ErrorIs(t, Free(0, cupy, -1, 0), gpu.ErrNoDevice, "CuPy's free, which gives no size")
	again, err := Alloc(0, 1000, 0)
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
				if ptr, err := Alloc(0, 512, 0); err == nil {
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
