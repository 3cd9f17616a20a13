package cthreads_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/cthreads"
	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/foreign"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/capi"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/internal/registry"
)

// The device the C calls opened stays open, as in a process that loads the
// library, with its root scope and the root's child on the C threads'
// stream, whose function waits in a goroutine for the scope's end, and the
// host device's streams for the C threads' stream handles, which run until
// the device closes: the C program checks that nothing is live in them when
// it is done.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m, gputest.IgnoreScope("libgpuscope")),
		goleak.IgnoreTopFunction("github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/foreign.openRecord.func1.1"),
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

// TestBadCallsThroughAnAllocatorFromCThreads: the context form's bad calls,
// each made from a C thread: a pointer it never gave, a double free, size
// 0, sizes beyond the device. Each gets its clear error (size 0 its NULL,
// quietly, as c10's allocator gives it) and loses nothing: the scope's
// buffer held across them stays live, and the pool counts what it did.
func TestBadCallsThroughAnAllocatorFromCThreads(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(64 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	s, err := dev.NewScope(gpu.Name("ort"))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	a, err := capi.For(s)
	require.NoError(t, err)
	held := cthreads.Alloc(a, 4096)
	require.NotZero(t, held)

	// fails checks that call fails once, with a message that says want,
	// and changes nothing: the held buffer is still the scope's one.
	fails := func(t *testing.T, call func(), want string) {
		t.Helper()
		n, _ := cthreads.Failures()
		call()
		after, last := cthreads.Failures()
		assert.Equal(t, n+1, after, "one failure counted")
		assert.Contains(t, last, want)
		assert.Equal(t, 1, s.Stats().Allocations, "the scope holds its one buffer")
		assert.EqualValues(t, 1, dev.Stats().ActiveBlocks, "nothing else is live")
	}
	t.Run("a pointer it never gave is refused", func(t *testing.T) {
		fails(t, func() { cthreads.FreeNeverGiven(a) }, "context allocator's free: ")
		fails(t, func() { cthreads.Free(a, held+256, 0) }, "not a live allocation")
	})
	t.Run("a double free is refused", func(t *testing.T) {
		p := cthreads.Alloc(a, 1000)
		require.NotZero(t, p)
		cthreads.Free(a, p, 1000)
		fails(t, func() { cthreads.Free(a, p, 1000) }, "not a live allocation")
	})
	t.Run("the wrong size frees nothing", func(t *testing.T) {
		fails(t, func() { cthreads.Free(a, held, 8192) }, "context allocator's free: ")
	})
	t.Run("size 0 is NULL, quietly", func(t *testing.T) {
		n, _ := cthreads.Failures()
		assert.Zero(t, cthreads.Alloc(a, 0))
		after, _ := cthreads.Failures()
		assert.Equal(t, n, after, "no failure counted")
		assert.EqualValues(t, 1, dev.Stats().ActiveBlocks)
	})
	t.Run("sizes beyond the device are NULL", func(t *testing.T) {
		var got uintptr
		fails(t, func() { got = cthreads.Alloc(a, 1<<40) }, "context allocator: ")
		assert.Zero(t, got)
		fails(t, func() { got = cthreads.Alloc(a, math.MaxUint64) }, "more than any device holds")
		assert.Zero(t, got)
	})
	cthreads.Free(a, held, 4096)
	assert.Zero(t, dev.Stats().ActiveBlocks)
}

// TestAllocatorAfterItsDeviceClosed: calls through an Allocator whose
// device closed, from C threads, fail with a clear error and lose nothing:
// allocations are NULL, and the free of a pointer it gave before the close
// (which the close freed) is refused.
func TestAllocatorAfterItsDeviceClosed(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(64 << 20))
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("ggml"))
	require.NoError(t, err)
	a, err := capi.For(s)
	require.NoError(t, err)
	p := cthreads.Alloc(a, 4096)
	require.NotZero(t, p)
	err = dev.Close() // with the scope open: the close ends it and frees what it held
	require.ErrorContains(t, err, "closed with 1 scope open: ggml", "the close reports the scope it ended")
	require.Len(t, registry.TakeForcedCloses[gpu.ScopeSnapshot](), 1, "the scope the close ended, on purpose here")

	n, _ := cthreads.Failures()
	require.Equal(t, 2*1000, cthreads.RunAllocator(a, 2, 0), "allocations after the device closed")
	after, last := cthreads.Failures()
	assert.Equal(t, n+2*1000, after, "each counted")
	assert.Contains(t, last, "context allocator: ")
	assert.Contains(t, last, "closed")

	cthreads.Free(a, p, 4096)
	after2, last := cthreads.Failures()
	assert.Equal(t, after+1, after2, "the free counted")
	assert.Contains(t, last, "context allocator's free: ")
	assert.Contains(t, last, "scope closed", "the close ended its scope and freed it")
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
// their last block in the C side's pair cache; a leak check from Go, which
// reads the device's Snapshot, finds nothing live in the library's scope.
// The device is opened anew for it, so that the check reports its root
// scope, which a check reports once.
func TestPairsFromCLeaveNoLeak(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	require.NoError(t, foreign.Shutdown())
	require.True(t, cthreads.Pairs(10, 4096))
	err := gputest.Find() // the library's root scope stays open, as in a process that loaded it
	require.Error(t, err)
	assert.Contains(t, err.Error(), "0 buffers (0 B) live", "the library freed all it allocated")
	assert.NotContains(t, err.Error(), "[Buffer of")
}
