package pool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func TestLoweringTheCapBelowReservedGivesBackWhatIsFreeAndKeepsLiveBlocks(t *testing.T) {
	src := sim.New(0, 0)
	p := newPool(t, src, pool.GrowthStep(0))
	keep, err := p.Alloc(40 * mib)
	require.NoError(t, err)
	drop, err := p.Alloc(60 * mib)
	require.NoError(t, err)
	require.NoError(t, p.Free(drop))
	require.Equal(t, int64(100*mib), p.Stats().Reserved)

	require.NoError(t, p.SetMaxReserved(30*mib), "a cap below what live blocks hold is allowed")
	assert.Equal(t, int64(30*mib), p.MaxReserved())
	assert.Equal(t, int64(40*mib), p.Stats().Reserved, "the free 60 MiB went back; the live 40 MiB stayed")
	assert.True(t, src.Accessible(keep.Ptr(), keep.Size()), "a live block stays mapped")
	require.NoError(t, p.CheckInvariants(src.Accessible))

	_, err = p.Alloc(8 * mib)
	require.ErrorIs(t, err, pool.ErrOutOfMemory, "growth past the cap fails")
	var oom *pool.OOMError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, int64(30*mib), oom.Limit)
	assert.Equal(t, int64(40*mib), p.Stats().Reserved, "a refused growth reserves nothing")

	require.NoError(t, p.Free(keep))
	require.NoError(t, p.EmptyCache())
	assert.Zero(t, p.Stats().Reserved)
	b, err := p.Alloc(20 * mib)
	require.NoError(t, err, "below the cap, growth works again")
	_, err = p.Alloc(20 * mib)
	require.ErrorIs(t, err, pool.ErrOutOfMemory, "but not past it")

	require.NoError(t, p.SetMaxReserved(0), "0 removes the cap")
	b2, err := p.Alloc(200 * mib)
	require.NoError(t, err)
	require.NoError(t, p.Free(b))
	require.NoError(t, p.Free(b2))
}

func TestRaisingTheCapLetsTheArenaGrowAgain(t *testing.T) {
	p := newPool(t, sim.New(0, 0), pool.MaxReserved(16*mib))
	_, err := p.Alloc(32 * mib)
	require.ErrorIs(t, err, pool.ErrOutOfMemory)
	require.NoError(t, p.SetMaxReserved(64*mib))
	b, err := p.Alloc(32 * mib)
	require.NoError(t, err)
	require.NoError(t, p.Free(b))
}

func TestTheCapAsAFractionOfTheDevice(t *testing.T) {
	p := newPool(t, sim.New(1<<30, 0))
	require.NoError(t, p.SetMaxReservedFraction(0.25))
	assert.Equal(t, int64(256*mib), p.MaxReserved())
	for _, f := range []float64{0, -0.5, 1.5} {
		require.Error(t, p.SetMaxReservedFraction(f), "fraction %v", f)
	}
	assert.Equal(t, int64(256*mib), p.MaxReserved(), "a refused fraction changes nothing")

	t.Run("a fraction too small for a byte is a cap of one byte, at New as later", func(t *testing.T) {
		p := newPool(t, sim.New(1<<30, 0), pool.MaxReservedFraction(1e-12))
		assert.Equal(t, int64(1), p.MaxReserved(), "not 0, which would mean no cap")
		require.NoError(t, p.SetMaxReservedFraction(1e-12))
		assert.Equal(t, int64(1), p.MaxReserved())
	})
}

func TestABadCapIsRefusedAndChangesNothing(t *testing.T) {
	p := newPool(t, sim.New(0, 0), pool.MaxReserved(64*mib))
	err := p.SetMaxReserved(-1)
	require.ErrorIs(t, err, pool.ErrInvalidSize)
	assert.Equal(t, int64(64*mib), p.MaxReserved())
	require.NoError(t, p.Close())
	require.ErrorIs(t, p.SetMaxReserved(32*mib), pool.ErrClosed)
	assert.Equal(t, int64(64*mib), p.MaxReserved())
}
