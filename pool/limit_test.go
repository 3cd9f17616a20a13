package pool_test

import (
	"fmt"
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

	t.Run("a fraction too small for a page is refused, at New as later", func(t *testing.T) {
		_, err := pool.New(sim.New(1<<30, 0), pool.MaxReservedFraction(1e-12))
		require.ErrorIs(t, err, pool.ErrInvalidSize)
		assert.Contains(t, err.Error(), "MaxReservedFraction(1e-12): a cap of 1 bytes is below one page of 2.00 MiB")
		err = p.SetMaxReservedFraction(1e-12)
		require.ErrorIs(t, err, pool.ErrInvalidSize)
		assert.Contains(t, err.Error(), "SetMaxReservedFraction(1e-12): a cap of 1 bytes is below one page")
		assert.Equal(t, int64(256*mib), p.MaxReserved(), "a refused fraction changes nothing")
	})
}

// A cap below one page, the least the pool reserves at once, could never
// serve an allocation: New and SetMaxReserved refuse it and say what
// would work. One page is enough for any allocation that fits in one.
func TestACapBelowOnePageIsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		src  func() pool.Source
		page int64
	}{
		{"pages of 2 MiB mapped", func() pool.Source { return sim.New(1<<30, 2*mib) }, 2 * mib},
		{"pages of 64 MiB mapped", func() pool.Source { return sim.New(1<<30, 64*mib) }, 64 * mib},
		{"whole segments, the least 2 MiB", func() pool.Source { return sim.New(1<<30, 64*mib).Plain() }, 2 * mib},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := pool.New(c.src(), pool.MaxReserved(c.page-1))
			require.ErrorIs(t, err, pool.ErrInvalidSize)
			assert.Contains(t, err.Error(), fmt.Sprintf("MaxReserved(%d): a cap of %d bytes", c.page-1, c.page-1))
			assert.Contains(t, err.Error(), fmt.Sprintf("give at least %d bytes, or leave the cap out for none", c.page))

			p := newPool(t, c.src(), pool.MaxReserved(c.page))
			b, err := p.Alloc(1000)
			require.NoError(t, err, "one page holds an allocation")
			require.NoError(t, p.Free(b))
			err = p.SetMaxReserved(c.page - 1)
			require.ErrorIs(t, err, pool.ErrInvalidSize)
			assert.Contains(t, err.Error(), fmt.Sprintf("give at least %d bytes, or 0 to remove the cap", c.page))
			assert.Equal(t, c.page, p.MaxReserved(), "a refused cap changes nothing")
			require.NoError(t, p.SetMaxReserved(0))
		})
	}
}

// An out-of-memory error shows the cap exactly where a unit would round
// it, and the page the pool reserves in: a cap of 3 MiB holds one page of
// 2 MiB, which a request of 2.5 MiB does not fit.
func TestAnOOMErrorNamesTheCapExactlyAndThePage(t *testing.T) {
	p := newPool(t, sim.New(1<<30, 2*mib), pool.MaxReserved(3*mib+1))
	_, err := p.Alloc(5 * mib / 2)
	var oom *pool.OOMError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, int64(2*mib), oom.Page)
	assert.Contains(t, err.Error(), "limit 3145729 bytes (3.00 MiB) in whole pages of 2.00 MiB")
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
