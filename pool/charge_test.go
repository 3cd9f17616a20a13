package pool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func TestChargedBytesCountAgainstTheCapAndInReserved(t *testing.T) {
	src := sim.New(0, 0)
	p := newPool(t, src, pool.MaxReserved(64*mib), pool.GrowthStep(0))
	require.NoError(t, p.Charge(40*mib), "memory held beside the pool, within the cap")
	st := p.Stats()
	assert.Equal(t, int64(40*mib), st.Reserved)
	assert.Equal(t, int64(40*mib), st.PeakReserved)

	_, err := p.Alloc(32 * mib)
	require.ErrorIs(t, err, pool.ErrOutOfMemory, "the pool grows only within what the charge leaves")
	b, err := p.Alloc(20 * mib)
	require.NoError(t, err)

	err = p.Charge(8 * mib)
	require.ErrorIs(t, err, pool.ErrOutOfMemory, "60 MiB reserved and 8 more pass the cap of 64")
	var oom *pool.OOMError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, int64(64*mib), oom.Limit)
	assert.Equal(t, int64(8*mib), oom.Requested)
	assert.Nil(t, oom.Err, "the cap refused it, not the source")
	assert.Equal(t, int64(60*mib), p.Stats().Reserved, "a refused charge counts nothing")

	require.NoError(t, p.Free(b))
	require.NoError(t, p.Charge(8*mib), "the cap makes room first: the cache goes back")
	st = p.Stats()
	assert.Equal(t, int64(48*mib), st.Reserved)
	assert.Equal(t, int64(1), st.OOMs, "the allocation that failed counts; a refused charge is its caller's to count")
	require.NoError(t, p.Charge(-48*mib), "giving the bytes back")
	assert.Zero(t, p.Stats().Reserved)
	assert.Equal(t, int64(60*mib), p.Stats().PeakReserved, "the peak counts charged bytes")
	require.NoError(t, p.CheckInvariants(src.Accessible))
}

func TestChargeAfterCloseFailsAndGivingBackStillWorks(t *testing.T) {
	p, err := pool.New(sim.New(0, 0))
	require.NoError(t, err)
	require.NoError(t, p.Charge(4*mib))
	require.NoError(t, p.Close())
	assert.ErrorIs(t, p.Charge(mib), pool.ErrClosed)
	require.NoError(t, p.Charge(-4*mib), "memory a pool of its own gives back after the device's pool closed")
	assert.Zero(t, p.Stats().Reserved)
}
