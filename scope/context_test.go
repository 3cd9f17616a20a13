package scope_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/scope"
)

// An allocation holds its scope's lock while it waits for memory (the
// pool waits for other streams' work): a caller that reads the scope's
// Context meanwhile goes on. Were Context to wait for the lock, this test
// would hang.
func TestContextDoesNotWaitForTheScopesLock(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "busy"})
	require.NoError(t, err)
	unlock := s.HoldLock()
	got := make(chan context.Context)
	go func() { got <- s.Context() }()
	ctx := <-got
	unlock()
	parent, ok := scope.FromContext(ctx)
	require.True(t, ok, "the context carries the scope")
	assert.Equal(t, s, parent)
	assert.Same(t, ctx, s.Context(), "one context a use")
	require.NoError(t, s.Close())
	assert.ErrorIs(t, context.Cause(s.Context()), errdefs.ScopeClosed)
}

// A Context read as the scope ends and its node serves the next scope is
// either the old scope's or a closed one, never the new scope's.
func TestContextOfAnEndedUseNeverNamesTheNext(t *testing.T) {
	tr := newTree(t)
	for range 200 {
		old, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
		require.NoError(t, err)
		seen := make(chan context.Context)
		go func() { seen <- old.Context() }()
		require.NoError(t, old.Close())
		next, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
		require.NoError(t, err)
		ctx := <-seen
		if s, ok := scope.FromContext(ctx); ok {
			assert.Equal(t, old, s)
		} else {
			assert.ErrorIs(t, context.Cause(ctx), errdefs.ScopeClosed)
		}
		require.NoError(t, next.Close())
	}
}
