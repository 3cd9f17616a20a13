package scope_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

func TestGenerationWrapsAroundAndStaleRefsStillFail(t *testing.T) {
	tr := newTree(t, pool.Shards(1))
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	defer s.Close()
	a, err := s.Alloc(512)
	require.NoError(t, err)
	last := scope.SetGeneration(a, scope.MaxGeneration)
	require.NoError(t, last.Use(func(uintptr) error { return nil }), "the slot is at its last generation")
	require.NoError(t, s.Free(last))

	b, err := s.Alloc(512) // the same slot: the scope's spare, last in first out
	require.NoError(t, err)
	assert.Equal(t, uint64(1), b.Gen(), "after the last generation comes 1, never 0")
	assert.False(t, b.IsZero())
	assert.ErrorIs(t, last.Use(func(uintptr) error { return nil }), errdefs.Freed, "the handle from before the wrap is stale")
	assert.ErrorIs(t, s.Free(last), errdefs.Freed)
	// a had generation 1 too: a handle 2^48 uses of its slot old names
	// the slot's use again. That is the bound the 48 bits set.
	assert.Equal(t, a.Gen(), b.Gen())
	assert.NoError(t, b.Use(func(uintptr) error { return nil }))
	require.NoError(t, s.Free(b))
}

func TestEndedScopesNodesAreReusedOnce(t *testing.T) {
	// Parents and children closed from several goroutines at once, and
	// children opened under parents that are ending: each node must come
	// back to the free list once per scope, never twice.
	tr := newTree(t)
	for range 100 {
		parent, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					c, err := tr.Open(parent.Context(), scope.Scope{}, scope.Options{})
					if err != nil {
						assert.ErrorIs(t, err, errdefs.ScopeClosed)
						return
					}
					if _, err := c.Alloc(100); err != nil {
						assert.ErrorIs(t, err, errdefs.ScopeClosed)
					}
					assert.NoError(t, c.Close())
				}
			}()
		}
		wg.Add(1)
		go func() { defer wg.Done(); assert.NoError(t, parent.Close()) }()
		wg.Wait()
		_, twice := tr.FreeNodes()
		require.False(t, twice, "a node waits for reuse twice")
	}
	assert.Empty(t, tr.Scopes())
	assert.Zero(t, tr.Pool().Stats().Allocated)
}
