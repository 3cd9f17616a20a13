package foreign

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// hostDevice makes device 0 a small host device, closed when the test ends.
func hostDevice(t *testing.T) *device {
	t.Helper()
	t.Setenv("GPUSCOPE_HOST_MEMORY", "67108864")
	d, err := deviceAt(0)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, Shutdown()) })
	return d
}

// Point 3 of issue 37: what a library allocates while a scope begun from C
// is current belongs to it, and the Snapshot, the Summary and gputest's
// leak report name it.
func TestForeignMemoryShowsUnderItsScopesName(t *testing.T) {
	d := hostDevice(t)
	id, err := Begin(0, "torch")
	require.NoError(t, err)
	ptr, err := Alloc(0, 4096, 0)
	require.NoError(t, err)

	snap, err := d.gpu.Snapshot()
	require.NoError(t, err)
	var found bool
	for _, s := range snap.Scopes {
		if s.Path == RootName+"/torch" {
			require.Len(t, s.Buffers, 1)
			assert.Equal(t, ptr, s.Buffers[0].Address)
			found = true
		}
	}
	assert.True(t, found, "no scope torch in the snapshot: %+v", snap.Scopes)
	assert.Contains(t, d.gpu.Summary(), "torch")
	leak := gputest.Find(gputest.Devices("host"))
	require.Error(t, leak)
	assert.Contains(t, leak.Error(), RootName+"/torch")

	require.NoError(t, Free(0, ptr, 4096, 0))
	require.NoError(t, End(id, false))
}

// A scope begun without a name (NULL from C) opens unnamed, as a Go scope
// without gpu.Name does; a name that would read as a path is refused.
func TestAScopeBegunWithoutANameIsUnnamed(t *testing.T) {
	d := hostDevice(t)
	id, err := Begin(0, "")
	require.NoError(t, err)
	assert.Regexp(t, `^`+RootName+`/[^/]+#\d+$`, d.current.Load().scope.Path(), "named as gpu names an unnamed scope")
	require.NoError(t, End(id, false))
	_, err = Begin(0, "a/b")
	assert.ErrorContains(t, err, `Name("a/b"): a scope's name must not hold "/"`)
}

// The current scope is the device's, not a thread's: a goroutine that
// did not begin it allocates in it (autograd's threads, in PyTorch).
func TestTheCurrentScopeServesEveryThread(t *testing.T) {
	d := hostDevice(t)
	id, err := Begin(0, "step")
	require.NoError(t, err)
	got := make(chan uintptr)
	go func() {
		ptr, err := Alloc(0, 512, 0)
		assert.NoError(t, err)
		got <- ptr
	}()
	ptr := <-got
	s := lookup(id).scope
	assert.Equal(t, 1, s.Stats().Allocations)
	require.NoError(t, End(id, true))
	assert.Zero(t, d.gpu.Stats().ActiveBlocks, "GPUSCOPE_FREE_LIVE freed it")
	require.ErrorContains(t, Free(0, ptr, 512, 0), "is no live allocation of this library")
}

func TestEndRefusesAScopeWithScopesInside(t *testing.T) {
	hostDevice(t)
	outer, err := Begin(0, "outer")
	require.NoError(t, err)
	inner, err := Begin(0, "inner")
	require.NoError(t, err)
	require.Error(t, End(outer, false))
	require.NoError(t, End(inner, false))
	require.NoError(t, End(outer, false))
	require.ErrorIs(t, End(outer, false), gpu.ErrScopeClosed)
}
