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
	id, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	ptr, err := Alloc(0, id, 4096, 0)
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
	hostDevice(t)
	id, err := Begin(0, 0, "")
	require.NoError(t, err)
	assert.Regexp(t, `^`+RootName+`/[^/]+#\d+$`, lookup(id).scope.Path(), "named as gpu names an unnamed scope")
	require.NoError(t, End(id, false))
	_, err = Begin(0, 0, "a/b")
	assert.ErrorContains(t, err, `Name("a/b"): a scope's name must not hold "/"`)
}

// A scope is its caller's (clib keeps one per thread): another caller
// that names the root allocates there, siblings end apart, and an
// allocation or a Begin that names a scope that ended fails with
// ErrEnded, for clib to forget it, never lands in another.
func TestScopesAreTheirCallersAndEndApart(t *testing.T) {
	d := hostDevice(t)
	req1, err := Begin(0, 0, "req1")
	require.NoError(t, err)
	req2, err := Begin(0, 0, "req2")
	require.NoError(t, err)
	p, err := Alloc(0, req1, 1<<20, 0)
	require.NoError(t, err)
	q, err := Alloc(0, req2, 512, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), lookup(req1).scope.Stats().Live)
	assert.Equal(t, int64(512), lookup(req2).scope.Stats().Live, "req1's MiB charged to req2")
	assert.Equal(t, RootName+"/req2", lookup(req2).scope.Path(), "req2 opened inside req1")

	require.NoError(t, Free(0, p, 1<<20, 0))
	require.NoError(t, End(req1, false), "req1 ends while req2, its sibling, is open")
	_, err = Alloc(0, req1, 512, 0)
	require.ErrorIs(t, err, ErrEnded)
	_, err = Begin(0, req1, "inside")
	require.ErrorIs(t, err, ErrEnded)
	require.NoError(t, End(req2, true))
	assert.Zero(t, d.gpu.Stats().ActiveBlocks, "GPUSCOPE_FREE_LIVE freed it")
	require.ErrorContains(t, Free(0, q, 512, 0), "is no live allocation of this library")
}

// A scope of another device is refused: a thread's scopes are per device.
func TestAScopeOfAnotherDeviceIsRefused(t *testing.T) {
	d := hostDevice(t)
	id, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	other := &device{index: 1, gpu: d.gpu, root: d.root}
	_, err = other.scopeOf(id)
	require.ErrorIs(t, err, gpu.ErrWrongScope)
	require.NoError(t, End(id, false))
}

func TestEndRefusesAScopeWithScopesInside(t *testing.T) {
	hostDevice(t)
	outer, err := Begin(0, 0, "outer")
	require.NoError(t, err)
	inner, err := Begin(0, outer, "inner")
	require.NoError(t, err)
	require.Error(t, End(outer, false))
	require.NoError(t, End(inner, false))
	require.NoError(t, End(outer, false))
	require.ErrorIs(t, End(outer, false), gpu.ErrScopeClosed)
}
