package pool_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func TestPeakAllocatedIsExactForOneGoroutineAcrossGCs(t *testing.T) {
	// A collection may move the goroutine's stack, and with it its shard.
	p := newPool(t, sim.New(0, 0), pool.Shards(2))
	gc := func() { runtime.GC(); runtime.GC() }
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

// deep calls fn at least n KiB deeper in the stack than its caller.
//
//go:noinline
func deep(n int, fn func()) {
	var pad [1024]byte
	if n > 0 {
		deep(n-1, fn)
	} else {
		fn()
	}
	runtime.KeepAlive(pad)
}

func TestPeakAllocatedIsExactForOneGoroutineThatMovesShards(t *testing.T) {
	// Allocations 64 KiB deeper in the stack find another shard. Each
	// shard is left room under its own high-water marks, and the peaks are
	// passed only by both shards' allocations together: they must be seen.
	p := newPool(t, sim.New(0, 0), pool.Shards(8))
	alloc := func(n int64) pool.Block {
		b, err := p.Alloc(n)
		require.NoError(t, err)
		return b
	}
	free := func(b pool.Block) { require.NoError(t, p.Free(b)) }
	var deepShard int
	deep(64, func() {
		// The deep shard peaks at 30 KiB in three blocks.
		c := []pool.Block{alloc(10 << 10), alloc(10 << 10), alloc(10 << 10)}
		deepShard = p.ShardOf(c[0])
		for _, b := range c {
			free(b)
		}
	})
	a1 := alloc(20 << 10) // the top: 20 KiB of the 30, one block of the three
	require.NotEqual(t, deepShard, p.ShardOf(a1), "the deep calls use another shard")
	a2 := alloc(8 << 10) // 28 KiB, two blocks
	deep(64, func() {
		b := alloc(8 << 10) // 36 KiB with a1 and a2: a new peak
		require.Equal(t, deepShard, p.ShardOf(b))
		free(b)
	})
	assert.Equal(t, int64(36<<10), p.Stats().PeakAllocated, "a1, a2 and b were live together")
	a3 := alloc(1 << 10) // three blocks at the top
	deep(64, func() { free(alloc(1 << 10)) })
	for _, b := range []pool.Block{a1, a2, a3} {
		free(b)
	}
	assert.Equal(t, int64(4), p.Stats().PeakActiveBlocks, "a1, a2, a3 and one deep block")
	for round := range 20 { // alternating between the two shards
		a := alloc(40 << 10)
		deep(64, func() { free(alloc(int64(round+1) << 10)) })
		free(a)
		assert.Equal(t, int64(41+round)<<10, p.Stats().PeakAllocated, "round %d", round)
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
