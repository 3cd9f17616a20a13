package sim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
)

func TestH200PricesTheWaitOfLargeReleasesOnly(t *testing.T) {
	for _, size := range []int64{2 << 20, 64 << 20, 256 << 20} {
		wait, ok := sim.H200.Cost(sim.PriceCreateAfterRelease, size)
		assert.True(t, ok)
		assert.Zero(t, wait, "no wait seen on the H200 after a release of %d bytes", size)
	}
	prev, _ := sim.H200.Cost(sim.PriceCreateAfterRelease, 256<<20)
	for _, size := range []int64{300 << 20, 400 << 20, 512 << 20, 2 << 30} {
		wait, _ := sim.H200.Cost(sim.PriceCreateAfterRelease, size)
		assert.GreaterOrEqual(t, wait, prev, "a larger release leaves no less to wait for")
		prev = wait
	}
	at512, _ := sim.H200.Cost(sim.PriceCreateAfterRelease, 512<<20)
	create, _ := sim.H200.Cost(sim.CallCreate, 512<<20)
	assert.Greater(t, at512, 5*create, "after a 512 MiB release the wait is most of the create")
}

func TestASourcePricesTheCallsItServes(t *testing.T) {
	const G = sim.DefaultPageSize
	s := sim.New(0, 0)
	va, err := s.ReserveAddress(64 * G)
	require.NoError(t, err)
	s.PriceWith(sim.H200)
	assert.Zero(t, s.Priced(), "nothing before PriceWith counts")
	var hs []uint64
	for i := range 3 {
		h, err := s.Create(4 * G)
		require.NoError(t, err)
		require.NoError(t, s.Map(va+uintptr(i*4*G), 4*G, h))
		hs = append(hs, h)
	}
	require.NoError(t, s.SetAccess(va, 12*G))
	create, _ := sim.H200.Cost(sim.CallCreate, 4*G)
	mapped, _ := sim.H200.Cost(sim.CallMap, 4*G)
	access, _ := sim.H200.Cost(sim.CallSetAccess, 4*G)
	extra, _ := sim.H200.Cost(sim.PriceSetAccessExtraHandle, 0)
	want := 3*create + 3*mapped + access + 2*extra
	assert.Equal(t, want, s.Priced(), "an access call over three handles costs the first's price and two extra handles")

	for i, h := range hs {
		require.NoError(t, s.Unmap(va+uintptr(i*4*G), 4*G))
		require.NoError(t, s.Release(h))
	}
	unmap, _ := sim.H200.Cost(sim.CallUnmap, 4*G)
	release, _ := sim.H200.Cost(sim.CallRelease, 4*G)
	want += 3*unmap + 3*release
	assert.Equal(t, want, s.Priced())
	h, err := s.Create(512 << 20)
	require.NoError(t, err)
	big, _ := sim.H200.Cost(sim.CallCreate, 512<<20)
	assert.Equal(t, want+big, s.Priced(), "releases of small handles leave no wait for the next create")
	require.NoError(t, s.Release(h))
	h, err = s.Create(2 * G)
	require.NoError(t, err)
	wait, _ := sim.H200.Cost(sim.PriceCreateAfterRelease, 512<<20)
	small, _ := sim.H200.Cost(sim.CallCreate, 2*G)
	bigRelease, _ := sim.H200.Cost(sim.CallRelease, 512<<20)
	assert.Equal(t, want+big+bigRelease+small+wait, s.Priced(), "a create after a large release waits for it")
	require.NoError(t, s.Release(h))
	require.NoError(t, s.ReleaseAddress(va, 64*G))
}
