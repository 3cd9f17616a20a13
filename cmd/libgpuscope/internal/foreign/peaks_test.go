package foreign

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 43, point 5: an allocation the pair cache does not serve, CuPy's
// here, that would raise a peak while the cache holds blocks has it give
// back those that would count in it: the peaks are what the library held
// at once (they read 160 MiB where it held at most 96 before). One that
// raises none leaves the cache as it is.
func TestPeaksCountNoBlockThePairCacheHolds(t *testing.T) {
	f := withFakePairs(t)
	d := hostDevice(t) // 64 MiB
	id, err := Begin(0, 0, "cupy")
	require.NoError(t, err)
	a := allocated(t, id, 16<<20)
	f.free(t, a, id)
	b, err := AllocInAfter(nil, 1, id, 0, 0, 24<<20) // held: 1
	require.NoError(t, err)
	assert.False(t, f.holds(a), "the cached 16 MiB would have counted in the peak")
	require.NoError(t, Free(0, b.Ptr, -1, 0))

	// Under the peak now, a block the cache holds stays there, where it is
	// too small for the pool to serve the allocation from it.
	c := allocated(t, id, 4<<20)
	f.free(t, c, id)
	e, err := AllocInAfter(nil, 1, id, 0, 0, 16<<20)
	require.NoError(t, err)
	assert.True(t, f.holds(c), "an allocation under the peaks took a block out of the cache")
	require.NoError(t, Free(0, e.Ptr, -1, 0))

	s := lookup(id).scope.Stats()
	assert.EqualValues(t, 24<<20, s.Peak, "the scope's peak")
	assert.EqualValues(t, 24<<20, d.root.scope.Stats().Peak, "the root's")
	assert.EqualValues(t, 24<<20, d.gpu.Stats().PeakAllocated, "the device's")
	require.NoError(t, End(id, false))
}

// An allocation the cache does not serve first has it give back the blocks
// the pool could serve it from, at least half its size, so that the pool
// need not grow for it; it keeps the others.
func TestAMissGivesBackTheBlocksThePoolCouldServeItFrom(t *testing.T) {
	f := withFakePairs(t)
	hostDevice(t)
	require.NoError(t, Free(0, allocated(t, 0, 32<<20).Ptr, -1, 0)) // peaks that what follows stays under
	small, big := allocated(t, 0, 4<<20), allocated(t, 0, 8<<20)
	f.free(t, small, 0)
	f.free(t, big, 0)
	a := allocated(t, 0, 12<<20)
	assert.False(t, f.holds(big), "the 8 MiB stayed in the cache")
	assert.True(t, f.holds(small), "the 4 MiB, too small to matter, left the cache")
	require.NoError(t, Free(0, a.Ptr, -1, 0))
}

// The cache gives back only what counts in the peak that would rise: a
// scope begun, whose first allocations raise its own peak from 0, leaves
// the enclosing scope's blocks in the cache.
func TestANewScopesPeakTakesNoOtherScopesBlocks(t *testing.T) {
	f := withFakePairs(t)
	hostDevice(t)
	require.NoError(t, Free(0, allocated(t, 0, 1<<20).Ptr, -1, 0)) // the root's peak: 1 MiB
	r := allocated(t, 0, 4096)
	f.free(t, r, 0)
	id, err := Begin(0, 0, "request")
	require.NoError(t, err)
	q := allocated(t, id, 64<<10)
	assert.True(t, f.holds(r), "the root's block left the cache for a peak of request's")
	require.NoError(t, Free(0, q.Ptr, -1, 0))
	require.NoError(t, End(id, false))
}

// A child on a library's stream counts in its peak the blocks of its
// scope on that stream only: an allocation for a stream leaves the
// cache's blocks of the default stream.
func TestAStreamsPeakTakesNoBlockOfAnotherStream(t *testing.T) {
	f := withFakePairs(t)
	hostDevice(t)
	const side = 0x5000                                            // a library's stream handle
	require.NoError(t, Free(0, allocated(t, 0, 1<<20).Ptr, -1, 0)) // the root's peak: 1 MiB
	r := allocated(t, 0, 4096)
	f.free(t, r, 0)
	q, err := alloc(0, 0, 64<<10, side, -1)
	require.NoError(t, err)
	assert.True(t, f.holds(r), "the default stream's block left the cache for a peak of the side stream's")
	require.NoError(t, Free(0, q.Ptr, -1, side))
}
