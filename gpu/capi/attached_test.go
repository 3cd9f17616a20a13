package capi_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/capi"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// A program that hands a library a scope per request keeps a bounded set
// of Allocators: those of ended scopes are dropped, and calls through them
// fail.
func TestAllocatorsOfEndedScopesAreDropped(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(16 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	var first capi.Allocator
	for i := range 3 * capi.MinSweep {
		s, err := dev.NewScope(gpu.Name("request"))
		require.NoError(t, err)
		a, err := capi.For(s)
		require.NoError(t, err)
		if i == 0 {
			first = a
		}
		ptr, err := capi.Alloc(a, 1000, 0)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		_, err = capi.Alloc(a, 1000, 0)
		require.ErrorIs(t, err, gpu.ErrScopeClosed, "an allocation in an ended scope")
		require.ErrorIs(t, capi.Free(a, ptr, 1000, 0), gpu.ErrScopeClosed, "a free after the scope freed it")
	}
	assert.LessOrEqual(t, capi.Attached(), 2*capi.MinSweep)
	_, err = capi.Alloc(first, 1000, 0)
	require.ErrorIs(t, err, gpu.ErrScopeClosed)
	assert.Zero(t, dev.Stats().ActiveBlocks)
}

// A free after the device closed is refused, and so is an allocation:
// nothing crashes, nothing else changes.
func TestCallsAfterTheDeviceClosedFail(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(16 << 20))
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("ort"))
	require.NoError(t, err)
	a, err := capi.For(s)
	require.NoError(t, err)
	ptr, err := capi.Alloc(a, 1000, 0)
	require.NoError(t, err)
	require.Error(t, dev.Close(), "the device reports the scope left open")
	require.ErrorContains(t, gputest.Find(), `"ort"`, "so does gputest, once")
	require.ErrorIs(t, capi.Free(a, ptr, 1000, 0), gpu.ErrScopeClosed)
	_, err = capi.Alloc(a, 1000, 0)
	require.ErrorIs(t, err, gpu.ErrScopeClosed)
}

// onFaulty opens a device whose streams a test can hold busy, a scope on
// it handed to a library, and a stream of the library's.
func onFaulty(t *testing.T) (a capi.Allocator, st *gpu.Stream, f *gputest.Faults) {
	t.Helper()
	dev, f, err := gputest.OpenFaulty(64 << 20)
	require.NoError(t, err)
	lib, err := dev.NewScope(gpu.Name("library's streams"))
	require.NoError(t, err)
	st, err = lib.NewStream()
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("onnx"))
	require.NoError(t, err)
	a, err = capi.For(s)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, s.Close())
		assert.NoError(t, lib.Close())
		assert.NoError(t, dev.Close())
	})
	return a, st, f
}

// Point 4 of issue 37: a block freed while work on the library's stream may
// use it is not reused before that work is done.
func TestABlockAllocatedOnAStreamWaitsForItsWork(t *testing.T) {
	a, st, f := onFaulty(t)
	ptr, err := capi.Alloc(a, 4096, st.ID())
	require.NoError(t, err)
	release, err := f.Hold(st)
	require.NoError(t, err)
	require.NoError(t, capi.Free(a, ptr, 4096, st.ID()))
	again, err := capi.Alloc(a, 4096, 0)
	require.NoError(t, err)
	assert.NotEqual(t, ptr, again, "reused while the stream may still use it")
	release()
	require.NoError(t, st.Synchronize())
	require.NoError(t, capi.Free(a, again, 0, 0))
}

// Without a hold, the stream's work is done: the block comes back.
func TestABlockOfAnIdleStreamIsReused(t *testing.T) {
	a, st, _ := onFaulty(t)
	ptr, err := capi.Alloc(a, 4096, st.ID())
	require.NoError(t, err)
	require.NoError(t, capi.Free(a, ptr, 4096, st.ID()))
	require.NoError(t, st.Synchronize())
	again, err := capi.Alloc(a, 4096, st.ID())
	require.NoError(t, err)
	assert.Equal(t, ptr, again)
	require.NoError(t, capi.Free(a, again, 0, st.ID()))
}

// Issue 43, point 2: a free that names another stream than the
// allocation's records a use there first: the block is not reused before
// that stream's work queued before the free has completed.
func TestAFreeNamingAnotherStreamWaitsForIt(t *testing.T) {
	a, st, f := onFaulty(t)
	ptr, err := capi.Alloc(a, 4096, 0)
	require.NoError(t, err)
	release, err := f.Hold(st)
	require.NoError(t, err)
	require.NoError(t, capi.Free(a, ptr, 4096, st.ID()))
	again, err := capi.Alloc(a, 4096, 0)
	require.NoError(t, err)
	assert.NotEqual(t, ptr, again, "reused while the stream named at the free may still use it")
	release()
	require.NoError(t, st.Synchronize())
	require.NoError(t, capi.Free(a, again, 0, 0))
}

// A scope on a side stream that a library allocates in for the default
// stream holds the block until the default stream's work has completed:
// where no event can be recorded there, the free says the block is held,
// and the next allocation gets another.
func TestABlockForTheDefaultStreamIsHeldWhereNoEventCanBeRecorded(t *testing.T) {
	dev, f, err := gputest.OpenFaulty(64 << 20)
	require.NoError(t, err)
	lib, err := dev.NewScope(gpu.Name("library's streams"))
	require.NoError(t, err)
	side, err := lib.NewStream()
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("onnx"), gpu.OnStream(side))
	require.NoError(t, err)
	a, err := capi.For(s)
	require.NoError(t, err)
	p, err := capi.Alloc(a, 4096, 0)
	require.NoError(t, err)
	f.FailWhen(func(c gputest.Call) bool { return c.Method == "RecordEvent" })
	assert.Error(t, capi.Free(a, p, 4096, 0), "the free says the block is held")
	again, err := capi.Alloc(a, 4096, 0)
	require.NoError(t, err)
	assert.NotEqual(t, p, again, "reused on its stream before the default stream's work")
	f.FailWhen(nil)
	require.NoError(t, capi.Free(a, again, 4096, 0))
	require.NoError(t, s.Close())
	require.NoError(t, lib.Close())
	require.NoError(t, dev.Close())
}

// The wrong size frees nothing, nor does a pointer the allocator never
// gave or gave and took back; size 0 is address 0, quietly.
func TestBadFreesChangeNothing(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(16 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	s, err := dev.NewScope()
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	a, err := capi.For(s)
	require.NoError(t, err)
	ptr, err := capi.Alloc(a, 1000, 0)
	require.NoError(t, err)
	require.ErrorIs(t, capi.Free(a, ptr, 2000, 0), gpu.ErrInvalidSize)
	require.ErrorIs(t, capi.Free(a, ptr+512, 0, 0), gpu.ErrFreed)
	require.NoError(t, capi.Free(a, 0, 0, 0), "free(NULL)")
	zero, err := capi.Alloc(a, 0, 0)
	require.NoError(t, err)
	require.Zero(t, zero)
	require.EqualValues(t, 1, s.Stats().Allocations)
	require.NoError(t, capi.Free(a, ptr, 0, 0))
	require.ErrorIs(t, capi.Free(a, ptr, 0, 0), gpu.ErrFreed, "a double free")
	require.Zero(t, s.Stats().Allocations)
}
