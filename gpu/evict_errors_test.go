package gpu_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// An evicted scope refuses everything with ErrEvicted, as its Alloc does
// and the Evictable godoc says: the scope's own methods, and those of its
// buffers, views and slices, while their handles' slots serve nothing else.
func TestAnEvictedScopeRefusesEverythingWithErrEvicted(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(3*slotSize))
	s, b := load(t, dev, 1, gpu.Evictable(0))
	x, err := gpu.Alloc[float32](s, 16)
	require.NoError(t, err)
	view, err := b.View(0, 64)
	require.NoError(t, err)
	xv, err := x.View(0, 4)
	require.NoError(t, err)
	other, ob := load(t, dev, 2)
	require.True(t, gpu.EvictOne(dev, slotSize))
	require.True(t, evicted(s))

	calls := map[string]error{}
	_, calls["Alloc"] = s.Alloc(64)
	_, calls["AllocHost"] = gpu.AllocHost[byte](s, 64)
	_, calls["NewStream"] = s.NewStream()
	calls["Free"] = s.Free(b)
	calls["Keep"] = s.Keep(b)
	_, calls["LoadModule"] = s.LoadModule([]byte("module"))
	_, calls["Alloc[T]"] = gpu.Alloc[int32](s, 4)
	calls["Context's cause"] = context.Cause(s.Context())
	calls["WithScope in it"] = gpu.WithScope(s.Context(), dev, func(*gpu.Scope) error { return nil })
	calls["Buffer.Use"] = b.Use(func(uintptr) error { return nil })
	calls["Buffer.CopyFromHost"] = b.CopyFromHost(make([]byte, 8))
	calls["Buffer.CopyToHost"] = b.CopyToHost(make([]byte, 8))
	calls["Buffer.CopyFrom"] = b.CopyFrom(ob)
	calls["Buffer.Memset"] = b.Memset(0)
	_, calls["Buffer.View"] = b.View(0, 8)
	calls["view.CopyToHost"] = view.CopyToHost(make([]byte, 8))
	calls["Slice.CopyFromHost"] = x.CopyFromHost(make([]float32, 4))
	calls["Slice.CopyToHost"] = x.CopyToHost(make([]float32, 4))
	calls["Slice.UseHost"] = x.UseHost(func([]float32) error { return nil })
	_, calls["Slice.View"] = x.View(0, 2)
	calls["slice view.CopyToHost"] = xv.CopyToHost(make([]float32, 4))
	calls["another buffer copying from it"] = ob.CopyFrom(view)
	for name, err := range calls {
		assert.ErrorIs(t, err, gpu.ErrEvicted, name)
	}
	holds(t, ob, 2)
	require.NoError(t, s.Close())
	require.NoError(t, other.Close())
}

// An allocation that eviction made room for did not run out of memory:
// Stats.OOMs and the Summary do not count it (OnOutOfMemory never hears
// of it either); the Summary counts it as served by eviction. One that
// fails after evicting counts once.
func TestAnAllocationEvictionServedIsNoOutOfMemory(t *testing.T) {
	var heard int
	dev := openHost(t, gpu.HostMemory(3*slotSize), gpu.OnOutOfMemory(func(error) { heard++ }))
	load(t, dev, 1, gpu.Evictable(0), gpu.Name("cache"))
	load(t, dev, 2, gpu.Evictable(0), gpu.Name("cache2"))
	load(t, dev, 3)
	require.NoError(t, allocElsewhere(t, dev), "eviction made room")
	st := dev.Stats()
	assert.Equal(t, int64(1), st.Evictions)
	assert.Zero(t, st.OOMs, "it did not run out of memory")
	assert.Zero(t, heard)
	assert.Contains(t, dev.Summary(), "0 out of memory")
	assert.Contains(t, dev.Summary(), "to make room, which served 1 allocation")

	// A request that evicts the last evictable scope and still finds no
	// room ran out of memory once.
	other, err := dev.NewScope()
	require.NoError(t, err)
	defer other.Close()
	_, err = other.Alloc(2 * slotSize)
	require.ErrorIs(t, err, gpu.ErrOutOfMemory)
	st = dev.Stats()
	assert.Equal(t, int64(2), st.Evictions)
	assert.Equal(t, int64(1), st.OOMs, "one request, one out of memory")
	assert.Equal(t, 1, heard)
	assert.Contains(t, dev.Summary(), "1 out of memory")
}
