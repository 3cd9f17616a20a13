package cthreads_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/cthreads"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/capi"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// The device the C calls opened stays open, as in a process that loads the
// library, with its root scope and the root's child on the C threads'
// stream, whose function waits in a goroutine for the scope's end, and the
// host device's streams for the C threads' stream handles, which run until
// the device closes: the C program checks that nothing is live in them when
// it is done.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m, gputest.IgnoreScope("libgpuscope")),
		goleak.IgnoreTopFunction("github.com/gpuscope/gpuscope/gpu/internal/foreign.openRecord.func1.1"),
		goleak.IgnoreAnyFunction("github.com/gpuscope/gpuscope/gpu/internal/host.(*stream).run"))
}

// TestCThreads: good calls, bad calls, scopes, and eight C threads
// allocating while scopes begin and end under them.
func TestCThreads(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	require.Equal(t, 0, cthreads.Run())
}

// TestAllocatorFromCThreads: a Go scope handed to C threads in the context
// form. What they leave allocated is the scope's, and the scope's end frees
// it.
func TestAllocatorFromCThreads(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(256 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	s, err := dev.NewScope(gpu.Name("onnx"))
	require.NoError(t, err)
	a, err := capi.For(s)
	require.NoError(t, err)

	require.Zero(t, cthreads.RunAllocator(a, 8, 2))
	require.Equal(t, 16, s.Stats().Allocations, "8 threads leave 2 buffers each")
	require.Contains(t, dev.Summary(), "onnx")

	require.NoError(t, s.Close())
	require.Zero(t, dev.Stats().ActiveBlocks)
}

// TestAllocatorAfterItsScopeEnded: calls through an Allocator whose scope
// ended fail, and lose nothing; the buffers the library held ended with
// the scope.
func TestAllocatorAfterItsScopeEnded(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(64 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	s, err := dev.NewScope(gpu.Name("ggml"))
	require.NoError(t, err)
	a, err := capi.For(s)
	require.NoError(t, err)
	require.Zero(t, cthreads.RunAllocator(a, 2, 3))
	require.NoError(t, s.Close())
	require.Zero(t, dev.Stats().ActiveBlocks)
	require.Equal(t, 2*1000, cthreads.RunAllocator(a, 2, 0), "allocations in an ended scope")
}

// TestARecordingNamesTheScopeOfCThreads: a recording of the device names
// the scope that C threads allocate in through the context form, as its
// Summary does, on every allocation they make.
func TestARecordingNamesTheScopeOfCThreads(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(256 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	var recorded bytes.Buffer
	rec, err := dev.StartRecording(&recorded)
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("onnx"))
	require.NoError(t, err)
	a, err := capi.For(s)
	require.NoError(t, err)
	require.Zero(t, cthreads.RunAllocator(a, 4, 1))
	require.Contains(t, dev.Summary(), "onnx")
	require.NoError(t, s.Close())
	require.NoError(t, rec.Stop())

	scopes := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(recorded.String()), "\n")[1:] {
		if f := strings.Split(line, ","); f[0] == "alloc" {
			require.Len(t, f, 5, "an allocation with its scope: %q", line)
			scopes[f[4]]++
		}
	}
	assert.Equal(t, map[string]int{"onnx": 4 * 1000}, scopes, "4 threads, 1000 allocations each")
}

// TestPairsFromCLeaveNoLeak: pairs through the PyTorch entry points leave
// their last block in the C side's front cache; a leak check from Go, which
// reads the device's Snapshot, finds nothing live in the library's scope.
func TestPairsFromCLeaveNoLeak(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	require.True(t, cthreads.Pairs(10, 4096))
	err := gputest.Find() // the library's root scope stays open, as in a process that loaded it
	require.Error(t, err)
	assert.Contains(t, err.Error(), "0 buffers (0 B) live", "the library freed all it allocated")
	assert.NotContains(t, err.Error(), "[Buffer of")
}
