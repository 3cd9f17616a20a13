package scope_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

func TestALimitCountsChildrenAndRefusesWithoutCharging(t *testing.T) {
	tr := newTree(t)
	root, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "root", Limit: 64 << 10})
	require.NoError(t, err)
	defer root.Close()
	child, err := tr.Open(root.Context(), scope.Scope{}, scope.Options{Name: "child"})
	require.NoError(t, err)
	held, err := child.Alloc(48 << 10)
	require.NoError(t, err)

	_, err = child.Alloc(32 << 10)
	var le *scope.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, scope.LimitError{Path: "root", Scope: root, Limit: 64 << 10, Live: 48 << 10, Requested: 32 << 10}, *le)
	assert.ErrorIs(t, err, errdefs.OutOfMemory, "a limit is an out-of-memory error")
	assert.Equal(t, int64(48<<10), root.Stats().Live, "the refused bytes are not counted")
	assert.Equal(t, int64(48<<10), child.Stats().Live)

	require.NoError(t, child.Free(held))
	again, err := child.Alloc(64 << 10)
	require.NoError(t, err, "after the free the limit has room")
	assert.Equal(t, int64(64<<10), root.Stats().Peak)
	require.NoError(t, child.Free(again))
}

func TestALimitCountsRoundedBytes(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Limit: 1024})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Alloc(1)
	require.NoError(t, err)
	assert.Equal(t, pool.Rounded(1), s.Stats().Live, "a 1-byte buffer holds a rounded block")
	_, err = s.Alloc(1024)
	assert.ErrorIs(t, err, errdefs.OutOfMemory)
}
