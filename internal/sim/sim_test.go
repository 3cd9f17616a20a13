package sim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/sim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(sim.Wrap(m))
}

func TestTheSourceChecksItsCallers(t *testing.T) {
	s := sim.New(4*sim.DefaultPageSize, 0)
	p, err := s.Alloc(sim.DefaultPageSize)
	require.NoError(t, err)
	assert.Error(t, s.Free(p, 1), "a free with the wrong size")
	require.NoError(t, s.Free(p, sim.DefaultPageSize))
	assert.Error(t, s.Free(p, sim.DefaultPageSize), "a double free")

	const G = sim.DefaultPageSize
	va, err := s.ReserveAddress(4 * G)
	require.NoError(t, err)
	h, err := s.Create(2 * G)
	require.NoError(t, err)
	_, err = s.Create(G + 1)
	assert.Error(t, err, "a size that is not whole granules")
	assert.Error(t, s.Map(va, G, h), "a handle is mapped whole")
	assert.Error(t, s.Map(va+1, 2*G, h), "an unaligned address")
	require.NoError(t, s.Map(va, 2*G, h))
	assert.False(t, s.Accessible(va, G), "mapped memory is not accessible before SetAccess")
	require.NoError(t, s.SetAccess(va, 2*G))
	assert.True(t, s.Accessible(va, 2*G))
	assert.False(t, s.Accessible(va, 2*G+1), "the third granule is not mapped")
	assert.Error(t, s.SetAccess(va, 3*G), "access to unmapped memory")
	assert.Error(t, s.Map(va+G, 2*G, h), "mapping over a mapping")
	require.NoError(t, s.Map(va+2*G, 2*G, h), "a handle may be mapped at a second address")
	assert.Error(t, s.Release(h), "releasing a mapped handle")
	assert.Error(t, s.ReleaseAddress(va, 4*G), "releasing address space with memory in it")
	assert.Error(t, s.Unmap(va, G), "unmapping part of a mapping")
	require.NoError(t, s.Unmap(va, 2*G))
	assert.Error(t, s.Release(h), "still mapped at its second address")
	require.NoError(t, s.Unmap(va+2*G, 2*G))
	require.NoError(t, s.Release(h))
	assert.Error(t, s.Release(h), "a double release")
	require.NoError(t, s.ReleaseAddress(va, 4*G))
	allocs, handles, reserves, _ := s.Live()
	assert.Zero(t, allocs+handles+reserves)
	c := s.Counts()
	assert.Equal(t, sim.Counts{Allocs: 1, Frees: 1, Creates: 1, Releases: 1, Maps: 2, SetAccesses: 1, Unmaps: 2,
		Reserves: 1, ReleasedReserves: 1}, c)
}

func TestCapacityIsOutOfMemory(t *testing.T) {
	s := sim.New(3*sim.DefaultPageSize, 0)
	h, err := s.Create(2 * sim.DefaultPageSize)
	require.NoError(t, err)
	_, err = s.Create(2 * sim.DefaultPageSize)
	assert.ErrorIs(t, err, sim.ErrOutOfMemory)
	assert.True(t, errdefs.IsSourceOutOfMemory(err))
	require.NoError(t, s.Release(h))
}

func TestTheCostTableInterpolates(t *testing.T) {
	table := sim.CostTable{"x": {{Size: 100, Time: 10}, {Size: 200, Time: 30}}}
	for size, want := range map[int64]time.Duration{0: 10, 100: 10, 150: 20, 200: 30, 1 << 40: 30} {
		got, ok := table.Cost("x", size)
		assert.True(t, ok)
		assert.Equal(t, want, got, "size %d", size)
	}
	_, ok := table.Cost("y", 1)
	assert.False(t, ok, "an unknown kind")
	for _, kind := range []string{sim.CallAlloc, sim.CallFree, sim.CallReserveAddress, sim.CallReleaseAddress,
		sim.CallCreate, sim.CallRelease, sim.CallMap, sim.CallSetAccess, sim.CallUnmap,
		sim.CallRecordEvent, sim.CallEventQuery, sim.CallWaitEvent, sim.CallDestroyEvent} {
		c, ok := sim.H200.Cost(kind, 2<<20)
		assert.True(t, ok && c > 0, "the H200 table prices %s", kind)
	}
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

func TestAccessibleFindsTheAllocationHoldingARange(t *testing.T) {
	const G = sim.DefaultPageSize
	s := sim.New(0, 0)
	small, err := s.Alloc(100)
	require.NoError(t, err)
	big, err := s.Alloc(3 * G)
	require.NoError(t, err)
	after, err := s.Alloc(G)
	require.NoError(t, err)
	assert.True(t, s.Accessible(small, 100))
	assert.False(t, s.Accessible(small, 101), "past the end of a small allocation")
	assert.True(t, s.Accessible(big+2*G+5, G-5), "the last page of a large one, from inside it")
	assert.False(t, s.Accessible(big+2*G, G+1), "straddling two allocations")
	assert.True(t, s.Accessible(after, G))
	require.NoError(t, s.Free(big, 3*G))
	assert.False(t, s.Accessible(big+G, 64), "a freed allocation")
	require.NoError(t, s.Free(small, 100))
	require.NoError(t, s.Free(after, G))
}

// runFunc is a TestingM whose tests are a function.
type runFunc func() int

func (f runFunc) Run() int { return f() }

func TestWrapFailsAPassingRunThatLeftMemoryHeld(t *testing.T) {
	s := sim.New(0, 0)
	var ptr uintptr
	leaky := runFunc(func() int {
		var err error
		ptr, err = s.Alloc(4096)
		require.NoError(t, err)
		return 0
	})
	assert.Equal(t, 1, sim.Wrap(leaky).Run(), "memory left held fails the run")
	require.NoError(t, s.Free(ptr, 4096))
	assert.Equal(t, 0, sim.Wrap(runFunc(func() int { return 0 })).Run(), "nothing held: it passes")
	assert.Equal(t, 7, sim.Wrap(runFunc(func() int { return 7 })).Run(), "a failed run keeps its code")
}

func TestReleasingAddressSpaceLooksAtWhatIsMappedNotAtEveryPage(t *testing.T) {
	s := sim.New(0, 0)
	const G = sim.DefaultPageSize
	// 2^37 pages: a scan of them would not end within the test's time.
	const huge = 1 << 58
	va, err := s.ReserveAddress(huge)
	require.NoError(t, err)
	h, err := s.Create(G)
	require.NoError(t, err)
	require.NoError(t, s.Map(va+huge/2, G, h))
	assert.ErrorContains(t, s.ReleaseAddress(va, huge), "still mapped", "a mapping inside it is found")
	require.NoError(t, s.Unmap(va+huge/2, G))
	require.NoError(t, s.Release(h))
	require.NoError(t, s.ReleaseAddress(va, huge))
	_, _, reserves, _ := s.Live()
	assert.Zero(t, reserves)
}
