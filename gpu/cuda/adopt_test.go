//go:build cuda

package cuda_test

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorgonia.org/cu"
)

// A stream a library made (here with cu directly, on the primary context
// the driver retains) is adopted: one id per handle, events record on it,
// and neither DestroyStream nor Close destroys it.
func TestAdoptStreamLeavesTheStreamToItsMaker(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := open(t)
	dev, err := cu.GetDevice(0)
	require.NoError(t, err)
	ctx, err := dev.RetainPrimaryCtx()
	require.NoError(t, err)
	defer func() { assert.NoError(t, dev.ReleasePrimaryCtx()) }()
	require.NoError(t, cu.SetCurrentContext(ctx))
	theirs, err := cu.MakeStream(cu.NonBlocking)
	require.NoError(t, err)
	defer func() { assert.NoError(t, theirs.Destroy()) }()
	h := *(*uintptr)(unsafe.Pointer(&theirs)) // a cu.Stream is its CUstream

	id, err := d.AdoptStream(h)
	require.NoError(t, err)
	again, err := d.AdoptStream(h)
	require.NoError(t, err)
	assert.Equal(t, id, again, "one id per handle")
	ev, err := d.RecordEvent(id)
	require.NoError(t, err)
	require.NoError(t, d.WaitEvent(ev))
	require.NoError(t, d.DestroyEvent(ev))
	assert.Error(t, d.DestroyStream(id), "the library's stream is not the driver's to destroy")
	require.NoError(t, d.Synchronize(id))
	require.NoError(t, d.Close())
	require.NoError(t, theirs.Synchronize(), "Close left the library's stream alone")
}

// A call on a thread that has another context current (a C library's
// thread, working on another device or context) leaves that context
// current.
func TestACallPutsTheThreadsContextBack(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := open(t)
	dev, err := cu.GetDevice(0)
	require.NoError(t, err)
	theirs, err := dev.MakeContext(cu.SchedAuto)
	require.NoError(t, err)
	defer func() { assert.NoError(t, theirs.Destroy()) }()
	require.NoError(t, cu.SetCurrentContext(theirs))
	ptr, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	cur, err := cu.CurrentContext()
	require.NoError(t, err)
	assert.Equal(t, theirs, cur, "the driver left its own context current")
	require.NoError(t, d.Free(ptr, 1<<20))
}
