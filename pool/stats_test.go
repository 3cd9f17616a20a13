package pool_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/pool/sim"
)

func TestPeakAllocatedIsExactForOneGoroutineAcrossGCs(t *testing.T) {
	// Few shards: after a GC the goroutine comes back to one it used.
	p := newPool(t, sim.New(0, 0), pool.Shards(2))
	gc := func() { runtime.GC(); runtime.GC() } // sync.Pool forgets in two
	for round := range 4 {
		p.ResetPeaks()
		a, err := p.Alloc(10 << 10)
		require.NoError(t, err)
		require.NoError(t, p.Free(a))
		gc()
		b, err := p.Alloc(10 << 10)
		require.NoError(t, err)
		gc()
		c, err := p.Alloc(10 << 10)
		require.NoError(t, err)
		gc()
		require.NoError(t, p.Free(b))
		require.NoError(t, p.Free(c))
		assert.Equal(t, int64(20<<10), p.Stats().PeakAllocated, "round %d: b and c were live together", round)
		assert.Equal(t, int64(2), p.Stats().PeakActiveBlocks, "round %d: two blocks at most", round)
	}
}

func TestTotalsAndCachedBlocksAreCounted(t *testing.T) {
	p := newPool(t, sim.New(0, 0), pool.Shards(1))
	a, err := p.Alloc(1000) // 1024 bytes
	require.NoError(t, err)
	b, err := p.Alloc(3 << 20)
	require.NoError(t, err)
	c, err := p.Alloc(100)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	require.NoError(t, p.Free(b))
	st := p.Stats()
	assert.Equal(t, int64(1024+3<<20+512), st.AllocatedBytes)
	assert.Equal(t, int64(1024+3<<20), st.FreedBytes)
	assert.Equal(t, int64(3), st.PeakActiveBlocks)
	assert.Equal(t, int64(1), st.ActiveBlocks)
	assert.Positive(t, st.CachedBlocks, "a in the front cache, b free in its arena")
	p.ResetPeaks()
	assert.Equal(t, int64(1), p.Stats().PeakActiveBlocks)
	require.NoError(t, p.Free(c))
}
