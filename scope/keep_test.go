package scope_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/scope"
)

func TestKeepHandsTheAllocationToTheParent(t *testing.T) {
	tr := newTree(t)
	parent, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "p"})
	require.NoError(t, err)
	defer parent.Close()
	child, err := tr.Open(parent.Context(), scope.Scope{}, scope.Options{Name: "c"})
	require.NoError(t, err)
	a, err := child.Alloc(4096)
	require.NoError(t, err)

	require.NoError(t, child.Keep(a))
	assert.Equal(t, parent, a.Owner())
	assert.Zero(t, child.Stats().Live)
	assert.Equal(t, int64(4096), parent.Stats().Live, "the parent counted it all along")
	require.NoError(t, child.Close())
	assert.NoError(t, a.Use(func(uintptr) error { return nil }), "it outlives the child")
	assert.ErrorIs(t, child.Keep(a), errdefs.ScopeClosed, "the child has ended")
	assert.ErrorIs(t, parent.Keep(a), errdefs.NotKept, "a root has no parent")
	require.NoError(t, parent.Free(a))
	assert.ErrorIs(t, parent.Free(a), errdefs.Freed)
}

func TestKeepOutOfTheScopesOwnReservationIsRefused(t *testing.T) {
	tr := newTree(t)
	parent, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	defer parent.Close()
	child, err := tr.Open(parent.Context(), scope.Scope{}, scope.Options{Reserve: 64 << 10})
	require.NoError(t, err)
	a, err := child.Alloc(4096)
	require.NoError(t, err)
	assert.ErrorIs(t, child.Keep(a), errdefs.NotKept)
	assert.Equal(t, child, a.Owner(), "a refused Keep changes nothing")
	require.NoError(t, child.Close())
}
