package scope_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/scope"
)

func TestACancelledContextStopsAllocationsNotFrees(t *testing.T) {
	tr := newTree(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	s, err := tr.Open(ctx, scope.Scope{}, scope.Options{Name: "job"})
	require.NoError(t, err)
	a, err := s.Alloc(4096)
	require.NoError(t, err)

	cause := errors.New("client went away")
	cancel(cause)
	_, err = s.Alloc(4096)
	assert.ErrorIs(t, err, cause, "the error carries the context's cause")
	assert.ErrorContains(t, err, `scope "job"`)
	_, err = tr.Open(s.Context(), scope.Scope{}, scope.Options{})
	assert.ErrorIs(t, err, cause, "no child opens under a cancelled context")

	require.NoError(t, s.Free(a), "freeing still works, so cleanup can run")
	assert.Zero(t, s.Stats().Live)
	require.NoError(t, s.Close())
	assert.Zero(t, tr.Pool().Stats().Allocated)
}

func TestAClosedScopeRefusesEverything(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "done"})
	require.NoError(t, err)
	a, err := s.Alloc(512)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")

	_, err = s.Alloc(512)
	assert.ErrorIs(t, err, errdefs.ScopeClosed)
	assert.ErrorIs(t, s.Free(a), errdefs.ScopeClosed)
	_, err = tr.Open(s.Context(), s, scope.Options{})
	assert.ErrorIs(t, err, errdefs.ScopeClosed)
	assert.True(t, s.Closed())
}
