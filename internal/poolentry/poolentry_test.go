package poolentry_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/poolentry"
	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(sim.Wrap(m)) }

// TestPoolSetsAllocRoundedAsDocumented holds the entry to the type scope
// names when it takes it: with another, scope's initialization panics.
func TestPoolSetsAllocRoundedAsDocumented(t *testing.T) {
	alloc, ok := poolentry.AllocRounded.(func(*pool.Pool, context.Context, int64, int64, uintptr) (pool.Block, error))
	require.True(t, ok, "pool sets AllocRounded with the documented type, not %T", poolentry.AllocRounded)

	p, err := pool.New(sim.New(0, 0))
	require.NoError(t, err)
	b, err := alloc(p, context.Background(), pool.Rounded(1000), 1000, 7)
	require.NoError(t, err)
	assert.Equal(t, int64(1000), b.Size(), "the block keeps the requested size")
	assert.Equal(t, uintptr(7), b.Stream())
	assert.Equal(t, pool.Rounded(1000), p.Stats().Allocated, "the pool set aside the rounded bytes")
	require.NoError(t, p.Free(b))

	require.NoError(t, p.Close())
	_, err = alloc(p, context.Background(), pool.Rounded(1000), 1000, 0)
	assert.ErrorIs(t, err, pool.ErrClosed, "a closed pool still refuses")
}
