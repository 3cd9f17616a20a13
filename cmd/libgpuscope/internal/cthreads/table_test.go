package cthreads_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/cthreads"
)

// The pair cache's table grows with the allocations it tracks and shrinks
// once they are freed: a burst of live allocations left it large for good,
// and every scope's end reads it whole while holding the lock every pair
// takes.
func TestThePairCachesTableShrinksOnceItsAllocationsAreFreed(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	cthreads.Stats(0) // the device opens, with its cache
	small := cthreads.TablePlaces()
	const n = 20000
	p := make([]uintptr, n)
	for k := range p {
		p[k] = cthreads.TorchAlloc(512, 0)
		require.NotZero(t, p[k])
	}
	assert.GreaterOrEqual(t, cthreads.TablePlaces(), 2*n, "the table tracks every allocation")
	for _, q := range p {
		cthreads.TorchFree(q, 512, 0)
	}
	assert.Equal(t, small, cthreads.TablePlaces(), "the table holds the 32 blocks the cache keeps")
}
