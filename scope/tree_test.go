package scope_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/scope"
)

func TestTreeListsScopesParentsFirst(t *testing.T) {
	tr := newTree(t)
	root, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "a"})
	require.NoError(t, err)
	child, err := tr.Open(root.Context(), root, scope.Options{Name: "b"})
	require.NoError(t, err)
	var paths []string
	for _, s := range tr.Scopes() {
		paths = append(paths, s.Path())
	}
	assert.Equal(t, []string{"a", "a/b"}, paths)
	got, ok := scope.FromContext(child.Context())
	require.True(t, ok)
	assert.Equal(t, child, got)
	assert.NotEqual(t, root.ID(), child.ID())
	left, err := tr.Close()
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, left)
	assert.True(t, child.Closed(), "closing a parent closes its children")
	_, err = tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	assert.ErrorIs(t, err, scope.ErrClosed)
}

func TestContextScopeOfSameTreeIsParent(t *testing.T) {
	tr, other := newTree(t), newTree(t)
	root, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "root"})
	require.NoError(t, err)
	defer root.Close()

	child, err := tr.Open(root.Context(), scope.Scope{}, scope.Options{Name: "child"})
	require.NoError(t, err)
	assert.Equal(t, "root/child", child.Path(), "a nil parent takes the scope the context carries")
	require.NoError(t, child.Close())

	// A scope of another device's tree is not a parent: the new scope is a root.
	foreign, err := other.Open(root.Context(), scope.Scope{}, scope.Options{Name: "foreign"})
	require.NoError(t, err)
	assert.Equal(t, "foreign", foreign.Path())
	require.NoError(t, foreign.Close())
}
