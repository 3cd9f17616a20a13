package sim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/pool/sim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m))
}

func TestTheSourceChecksItsCallers(t *testing.T) {
	s := sim.New(4*sim.DefaultPageSize, 0)
	p, err := s.Alloc(sim.DefaultPageSize)
	require.NoError(t, err)
	assert.Error(t, s.Free(p, 1), "a free with the wrong size")
	require.NoError(t, s.Free(p, sim.DefaultPageSize))
	assert.Error(t, s.Free(p, sim.DefaultPageSize), "a double free")

	va, err := s.ReserveAddress(2 * sim.DefaultPageSize)
	require.NoError(t, err)
	pg, err := s.CreatePage()
	require.NoError(t, err)
	require.NoError(t, s.MapPages(va, []uint64{pg}))
	assert.True(t, s.Accessible(va, sim.DefaultPageSize))
	assert.False(t, s.Accessible(va, sim.DefaultPageSize+1), "the second page is not mapped")
	assert.Error(t, s.MapPages(va, []uint64{pg}), "mapping twice")
	assert.Error(t, s.ReleasePage(pg), "releasing a mapped page")
	assert.Error(t, s.ReleaseAddress(va, 2*sim.DefaultPageSize), "releasing address space with pages in it")
	require.NoError(t, s.UnmapPages(va, sim.DefaultPageSize))
	require.NoError(t, s.ReleasePage(pg))
	require.NoError(t, s.ReleaseAddress(va, 2*sim.DefaultPageSize))
	allocs, pages, reserves, _ := s.Live()
	assert.Zero(t, allocs+pages+reserves)
}

func TestCapacityIsOutOfMemory(t *testing.T) {
	s := sim.New(sim.DefaultPageSize, 0)
	_, err := s.CreatePage()
	require.NoError(t, err)
	_, err = s.CreatePage()
	assert.ErrorIs(t, err, sim.ErrOutOfMemory)
	assert.True(t, pool.IsSourceOutOfMemory(err))
}

func TestBusyStreamsHoldTheirEvents(t *testing.T) {
	s := sim.New(0, 0)
	s.SetBusy(3, true)
	ev, err := s.RecordEvent(3)
	require.NoError(t, err)
	done, err := s.EventDone(ev)
	require.NoError(t, err)
	assert.False(t, done)
	s.SetBusy(3, false)
	done, _ = s.EventDone(ev)
	assert.True(t, done)
	require.NoError(t, s.DestroyEvent(ev))
	assert.Error(t, s.DestroyEvent(ev))
}
