package scope_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/errdefs"
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
	assert.ErrorIs(t, err, errdefs.ScopeClosed)
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

// TestChildrenOpeningAsTheirParentEndsHoldNothing races opens of children,
// with and without a reservation, against their parent's end: each open
// either fails with ErrClosed, holding nothing, or opens a child that the
// parent's end closes. Every byte and every node comes back.
func TestChildrenOpeningAsTheirParentEndsHoldNothing(t *testing.T) {
	tr := newTree(t)
	reserves := []int64{0, 64 << 10, 0, 64 << 10}
	for range 100 {
		parent, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "parent"})
		require.NoError(t, err)
		children := make([]scope.Scope, len(reserves))
		start := make(chan struct{}) // all open at once, as the parent ends
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			assert.NoError(t, parent.Close())
		})
		for i, reserve := range reserves {
			wg.Go(func() {
				<-start
				child, err := tr.Open(context.Background(), parent, scope.Options{Reserve: reserve})
				if err != nil {
					assert.ErrorIs(t, err, errdefs.ScopeClosed)
					return
				}
				children[i] = child
			})
		}
		close(start)
		wg.Wait()
		for _, c := range children {
			assert.True(t, c.Closed(), "an opened child ended with its parent")
		}
		assert.Empty(t, tr.Scopes())
		assert.Zero(t, tr.Pool().Stats().Allocated, "every reservation went back")
		_, twice := tr.FreeNodes()
		require.False(t, twice, "a node waits for reuse twice")
	}
}

// Grandchildren, with and without a reservation, open and allocate while
// their grandparent and parent end, and roots open beside them, reusing
// the ended scopes' nodes: no root ever shows another scope's bytes, and
// under -race no node is read as it is set up for another scope.
func TestScopesOpenedWhileOthersEndShowNoBytesOfTheirs(t *testing.T) {
	tr := newTree(t)
	for range 100 {
		gp, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "gp"})
		require.NoError(t, err)
		p, err := tr.Open(context.Background(), gp, scope.Options{Name: "p"})
		require.NoError(t, err)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; assert.NoError(t, gp.Close()) })
		wg.Go(func() { <-start; _ = p.Close() })
		for i := range 6 {
			wg.Go(func() {
				<-start
				c, err := tr.Open(context.Background(), p, scope.Options{Reserve: int64(i%2) * (64 << 10)})
				if err != nil {
					assert.ErrorIs(t, err, errdefs.ScopeClosed)
					return
				}
				if _, err := c.Alloc(4096); err != nil {
					assert.ErrorIs(t, err, errdefs.ScopeClosed)
				}
				_ = c.Close()
			})
			wg.Go(func() {
				<-start
				o, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
				if !assert.NoError(t, err) {
					return
				}
				assert.Zero(t, o.Stats().Live)
				assert.NoError(t, o.Close())
			})
		}
		close(start)
		wg.Wait()
		assert.Empty(t, tr.Scopes())
		assert.Zero(t, tr.Pool().Stats().Allocated)
		_, twice := tr.FreeNodes()
		require.False(t, twice)
	}
}
