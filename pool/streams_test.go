package pool_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func TestStreams(t *testing.T) {
	// Each device holds one page, so every reuse is forced and visible.
	const a, b = uintptr(1), uintptr(2)
	const page = sim.DefaultPageSize
	t.Run("a block is reused at once on its own stream", func(t *testing.T) {
		src := sim.New(page, 0)
		p := newPool(t, src)
		x, err := p.AllocOn(page, a)
		require.NoError(t, err)
		require.NoError(t, p.Free(x))
		y, err := p.AllocOn(page, a)
		require.NoError(t, err, "only x's memory exists")
		assert.Equal(t, x.Ptr(), y.Ptr())
		assert.Zero(t, src.Counts().EventsRecorded, "no event on the hot path")
		require.NoError(t, p.Free(y))
	})
	t.Run("a block another stream used waits for that stream's event", func(t *testing.T) {
		src := sim.New(page, 0)
		p := newPool(t, src)
		x, err := p.AllocOn(page, a)
		require.NoError(t, err)
		require.NoError(t, p.RecordUse(x, b))
		src.SetBusy(b, true)
		require.NoError(t, p.Free(x))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = p.AllocContext(ctx, page, a)
		require.ErrorIs(t, err, pool.ErrOutOfMemory, "stream b may still read x, and the caller would not wait")
		require.ErrorIs(t, err, context.Canceled)
		assert.Zero(t, src.Counts().EventsWaited)
		src.SetBusy(b, false)
		z, err := p.AllocOn(page, a)
		require.NoError(t, err, "once b's event completed x is reused")
		assert.Equal(t, x.Ptr(), z.Ptr())
		require.NoError(t, p.Free(z))
	})
	t.Run("out of memory, the pool waits for the blocks other streams hold", func(t *testing.T) {
		src := sim.New(page, 0)
		p := newPool(t, src)
		x, err := p.AllocOn(page, a)
		require.NoError(t, err)
		require.NoError(t, p.RecordUse(x, b))
		src.SetBusy(b, true)
		require.NoError(t, p.Free(x))
		y, err := p.AllocOn(page, a)
		require.NoError(t, err, "as PyTorch does, it synchronizes before it fails")
		assert.Positive(t, src.Counts().EventsWaited)
		assert.Equal(t, x.Ptr(), y.Ptr())
		require.NoError(t, p.Free(y))
	})
	t.Run("EmptyCache returns the blocks other streams held", func(t *testing.T) {
		src := sim.New(0, 0)
		p := newPool(t, src)
		x, err := p.AllocOn(32<<20, a)
		require.NoError(t, err)
		require.NoError(t, p.RecordUse(x, b))
		src.SetBusy(b, true)
		require.NoError(t, p.Free(x))
		require.NoError(t, p.EmptyCache())
		assert.Zero(t, p.Stats().Reserved)
		assert.Zero(t, src.Used())
	})
	t.Run("a stream that cannot be waited for keeps only its own memory", func(t *testing.T) {
		src := sim.New(0, 0)
		p := newPool(t, src, pool.GrowthStep(0))
		x, err := p.AllocOn(32<<20, a)
		require.NoError(t, err)
		y, err := p.AllocOn(32<<20, b)
		require.NoError(t, err)
		require.NoError(t, p.Free(x))
		require.NoError(t, p.Free(y))
		src.Break(b)
		err = p.EmptyCache()
		require.Error(t, err, "stream b's memory cannot be proven idle")
		assert.Contains(t, err.Error(), "stream 0x2")
		assert.Equal(t, int64(32<<20), p.Stats().Reserved, "stream a's memory went back; b's is kept")
		src.Repair(b)
		require.NoError(t, p.Close(), "once b can be waited for again, all of it goes back")
		assert.Zero(t, src.Used())
	})
	t.Run("another stream gets a cached block only after an event on its stream", func(t *testing.T) {
		src := sim.New(page, 0)
		p := newPool(t, src)
		x, err := p.AllocOn(page, a)
		require.NoError(t, err)
		require.NoError(t, p.Free(x))
		y, err := p.AllocOn(page, b)
		require.NoError(t, err)
		assert.Positive(t, src.Counts().EventsWaited, "the pool waited for stream a's work first")
		require.NoError(t, p.Free(y))
	})
	t.Run("RecordUse without events is an error", func(t *testing.T) {
		p := newPool(t, plainNoEvents{sim.New(0, 0)})
		x, err := p.Alloc(64)
		require.NoError(t, err)
		assert.Error(t, p.RecordUse(x, b))
		require.NoError(t, p.Free(x))
	})
}

// Large blocks on streams taking turns each return to their own stream's
// arena; a retired stream's arena is dropped with its memory, and the
// stream is not allocated on again.
func TestArenasOfStreamsTakingTurnsAndOfARetiredStream(t *testing.T) {
	const size = 64 << 20
	p := newPool(t, sim.New(0, 0))
	for _, stream := range []uintptr{5, 6, 5, 6, 0, 5} {
		b, err := p.AllocOn(size, stream)
		require.NoError(t, err)
		assert.Equal(t, stream, b.Stream())
		require.NoError(t, p.Free(b))
		require.NoError(t, p.CheckInvariants(nil))
	}
	require.NoError(t, p.RetireStream(5))
	require.NoError(t, p.EmptyCache())
	for _, seg := range p.Snapshot().Segments {
		assert.NotEqual(t, uintptr(5), seg.Stream, "the retired stream's memory went back")
	}
	_, err := p.AllocOn(size, 5)
	assert.ErrorContains(t, err, "retired")
	b, err := p.AllocOn(size, 6)
	require.NoError(t, err)
	require.NoError(t, p.Free(b))
	require.NoError(t, p.CheckInvariants(nil))
}
