package sim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
