package sim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
)

const mib = 1 << 20

// alloc allocates in the model and fails the test on an error.
func alloc(t *testing.T, m *sim.TorchExpandable, addr uint64, size int64) bool {
	t.Helper()
	ok, err := m.Alloc(addr, size, 0)
	require.NoError(t, err)
	return ok
}

func TestTorchExpandableMapsPagesOfItsPool(t *testing.T) {
	m := sim.NewTorchExpandable(0)
	require.True(t, alloc(t, m, 1, 512*1024))
	assert.Equal(t, int64(2*mib), m.Mapped(), "a small request maps a 2 MiB page")
	require.True(t, alloc(t, m, 2, 30*mib))
	assert.Equal(t, int64(42*mib), m.Mapped(), "a large one the 20 MiB pages it spans")
	require.True(t, alloc(t, m, 3, 10*mib))
	assert.Equal(t, int64(42*mib), m.Mapped(), "the rest of the last page serves the next")
	m.Free(2)
	m.Free(3)
	require.True(t, alloc(t, m, 4, 35*mib))
	assert.Equal(t, int64(42*mib), m.Mapped(), "freed blocks merge and are reused")
	assert.Equal(t, int64(42*mib), m.PeakMapped())
}

func TestTorchExpandableChecksTheWholeRequestAgainstTheCap(t *testing.T) {
	m := sim.NewTorchExpandable(100 * mib)
	require.True(t, alloc(t, m, 1, 50*mib)) // 60 MiB mapped
	require.True(t, alloc(t, m, 2, 20*mib)) // in the last page's rest and one more: 80
	m.Free(1)
	// No free block holds 55 MiB, and 80 mapped + 56 passes the cap: the
	// two whole pages of the freed 50 MiB are unmapped first, and then
	// 40 + 56 fits, mapped after the live block.
	require.True(t, alloc(t, m, 3, 55*mib))
	assert.Equal(t, int64(100*mib), m.Mapped())
	// Nothing free fills a whole page now: 30 MiB more cannot fit.
	assert.False(t, alloc(t, m, 4, 30*mib))
	assert.Equal(t, int64(100*mib), m.Mapped())
}

func TestTorchExpandableRejectsATraceItCannotReplay(t *testing.T) {
	m := sim.NewTorchExpandable(0)
	require.True(t, alloc(t, m, 1, mib))
	_, err := m.Alloc(1, mib, 0)
	assert.Error(t, err, "an address allocated twice")
	_, err = m.Alloc(2, 0, 0)
	assert.Error(t, err, "a size of zero")
	m.Free(99) // allocated before the trace began: skipped, as replays do
	m.Free(1)
	assert.Equal(t, int64(2*mib), m.Mapped(), "freed memory stays mapped, cached")
}
