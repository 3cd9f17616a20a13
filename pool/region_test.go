package pool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/pool"
)

func TestRegionSubAllocatesAndCoalesces(t *testing.T) {
	r, err := pool.NewRegion(1<<20, 4096)
	require.NoError(t, err)
	a, na, ok := r.Alloc(1000)
	require.True(t, ok)
	assert.Equal(t, int64(1024), na)
	b, _, ok := r.Alloc(3072)
	require.True(t, ok)
	assert.Equal(t, a+1024, b)
	_, _, ok = r.Alloc(1)
	assert.False(t, ok, "the region is full")
	require.NoError(t, r.Free(a))
	assert.Error(t, r.Free(a), "double free")
	require.NoError(t, r.Free(b))
	c, _, ok := r.Alloc(4096)
	require.True(t, ok, "freed neighbours coalesce")
	assert.Equal(t, uintptr(1<<20), c)
	assert.Equal(t, int64(4096), r.Used())
	_, err = pool.NewRegion(0, -1)
	assert.ErrorIs(t, err, pool.ErrInvalidSize)
}
