package host_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/gpu/internal/host"
	"github.com/gpuscope/gpuscope/internal/errdefs"
)

func TestCapacityDoubleFreeAndBounds(t *testing.T) {
	d, err := host.New(1 << 20)
	require.NoError(t, err)
	p, err := d.Alloc(1 << 19)
	require.NoError(t, err)
	_, err = d.Alloc(1 << 20)
	assert.True(t, errdefs.IsSourceOutOfMemory(err), "beyond capacity is out of memory: %v", err)
	assert.Error(t, d.CopyHtoD(p+(1<<19)-1, []byte{1, 2}, 0), "a copy past the end")
	assert.Error(t, d.CopyHtoD(12345, []byte{1}, 0), "an unknown pointer")
	require.NoError(t, d.CopyHtoD(p, []byte{7, 7}, 0))
	require.NoError(t, d.Free(p, 1<<19))
	assert.Error(t, d.Free(p, 1<<19), "a double free")
	assert.Error(t, d.CopyDtoH(make([]byte, 1), p, 0), "freed memory is gone")
	assert.Error(t, d.CopyHtoD(p, []byte{1}, 99), "an unknown stream")
	require.NoError(t, d.Close())
	_, err = d.Alloc(1)
	assert.ErrorIs(t, err, driver.ErrClosed)
}

func TestStreamsAndEvents(t *testing.T) {
	d, err := host.New(1 << 20)
	require.NoError(t, err)
	defer d.Close()
	s, err := d.NewStream()
	require.NoError(t, err)
	ev, err := d.RecordEvent(s)
	require.NoError(t, err)
	done, err := d.EventDone(ev)
	require.NoError(t, err)
	assert.True(t, done)
	require.NoError(t, d.WaitEvent(ev))
	require.NoError(t, d.DestroyEvent(ev))
	assert.Error(t, d.DestroyEvent(ev))
	require.NoError(t, d.Synchronize(s))
	require.NoError(t, d.DestroyStream(s))
	assert.Error(t, d.DestroyStream(s))
}

func TestBadCapacities(t *testing.T) {
	for _, c := range []int64{0, -1} {
		_, err := host.New(c)
		assert.Error(t, err, "capacity %d", c)
	}
}

// Page-locked host memory has its own capacity, as large as the device's:
// a HostFree gives its bytes back, a double one is refused and loses
// nothing.
func TestPinnedMemoryHasACapacityThatFreesGiveBack(t *testing.T) {
	d, err := host.New(1 << 20)
	require.NoError(t, err)
	defer d.Close()
	a, err := d.HostAlloc(3 << 18)
	require.NoError(t, err)
	_, err = d.HostAlloc(1 << 19)
	assert.True(t, errdefs.IsSourceOutOfMemory(err), "3/4 of the capacity held, half more is too much: %v", err)
	b, err := d.HostAlloc(1 << 18)
	require.NoError(t, err, "what is left fits")
	require.NoError(t, d.HostFree(a))
	assert.Error(t, d.HostFree(a), "a double free")
	c, err := d.HostAlloc(3 << 18)
	require.NoError(t, err, "the freed bytes count as free again, once")
	_, err = d.HostAlloc(1)
	assert.True(t, errdefs.IsSourceOutOfMemory(err))
	require.NoError(t, d.HostFree(b))
	require.NoError(t, d.HostFree(c))
}
