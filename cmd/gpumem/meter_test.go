package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

// meteredSim is a meter over an unlimited simulated source, pricing with
// table.
func meteredSim(t *testing.T, table sim.CostTable) (pool.PageMapper, *meter) {
	t.Helper()
	src, m, err := newMeter(sim.New(0, 0), table)
	require.NoError(t, err)
	pm, ok := src.(pool.PageMapper)
	require.True(t, ok)
	return pm, m
}

// createdFor creates a handle of size and returns it and what its create
// was priced at.
func createdFor(t *testing.T, pm pool.PageMapper, m *meter, size int64) (uint64, time.Duration) {
	t.Helper()
	h, err := pm.Create(size)
	require.NoError(t, err)
	tl, _ := m.take()
	require.EqualValues(t, 1, tl.Calls[sim.CallCreate])
	return h, time.Duration(tl.ByNs[sim.CallCreate])
}

func TestACreateAfterAReleaseWaitsForIt(t *testing.T) {
	const S = 512 << 20
	pm, m := meteredSim(t, sim.H200)
	alone, _ := sim.H200.Cost(sim.CallCreate, 2<<20)
	wait, _ := sim.H200.Cost(sim.PriceCreateAfterRelease, S)
	require.Positive(t, wait, "sim.H200 prices the wait after a 512 MiB release")

	small, took := createdFor(t, pm, m, 2<<20)
	assert.Equal(t, alone, took, "a create with no release before it")
	big, _ := createdFor(t, pm, m, S)
	require.NoError(t, pm.Release(big))
	h, took := createdFor(t, pm, m, 2<<20)
	assert.Equal(t, alone+wait, took, "a create right after the release of S bytes")
	again, took := createdFor(t, pm, m, 2<<20)
	assert.Equal(t, alone, took, "the create before took the wait")

	for _, x := range []uint64{small, h, again} {
		require.NoError(t, pm.Release(x))
	}
}

func TestTheWaitsOfReleasesBeforeACreateAddUp(t *testing.T) {
	table := sim.CostTable{
		sim.CallCreate:              {{Time: 10 * time.Microsecond}},
		sim.CallRelease:             {{Time: 20 * time.Microsecond}},
		sim.PriceCreateAfterRelease: {{Size: 4 << 20}, {Size: 8 << 20, Time: 400 * time.Microsecond}},
	}
	pm, m := meteredSim(t, table)
	var hs []uint64
	for _, size := range []int64{2 << 20, 6 << 20, 8 << 20, 16 << 20} {
		h, took := createdFor(t, pm, m, size)
		assert.Equal(t, 10*time.Microsecond, took)
		hs = append(hs, h)
	}
	for _, h := range hs {
		require.NoError(t, pm.Release(h))
	}
	tl, _ := m.take()
	assert.EqualValues(t, 4*20*time.Microsecond, tl.ByNs[sim.CallRelease], "a release is priced alone")
	// 2 MiB: none; 6 MiB: half way; 8 MiB and beyond: all of it.
	h, took := createdFor(t, pm, m, 2<<20)
	assert.Equal(t, (10+0+200+400+400)*time.Microsecond, took)
	require.NoError(t, pm.Release(h))
}

func TestAMeasuredReplayOwesNoWait(t *testing.T) {
	pm, m := meteredSim(t, nil)
	h, err := pm.Create(512 << 20)
	require.NoError(t, err)
	require.NoError(t, pm.Release(h))
	assert.Zero(t, m.owed, "without a cost table the create's own time is measured")
}
