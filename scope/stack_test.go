package scope_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/scope"
)

// firstFunction returns the function of a recorded stack's first frame.
func firstFunction(stack []uintptr) string {
	if len(stack) == 0 {
		return ""
	}
	f, _ := runtime.CallersFrames(stack).Next()
	return f.Function
}

func TestStacksStartAtTheCaller(t *testing.T) {
	const here = "github.com/gpuscope/gpuscope/scope_test.TestStacksStartAtTheCaller"
	tr := newTree(t)
	tr.RecordStacks(true)
	ctx := context.Background()
	root, err := tr.Open(ctx, scope.Scope{}, scope.Options{Name: "root"})
	require.NoError(t, err)
	defer root.Close()
	child, err := tr.Open(ctx, root, scope.Options{Name: "child"})
	require.NoError(t, err)
	reserved, err := tr.Open(ctx, root, scope.Options{Name: "reserved", Reserve: 1 << 20})
	require.NoError(t, err)
	reservedRoot, err := tr.Open(ctx, scope.Scope{}, scope.Options{Name: "reservedRoot", Reserve: 1 << 20})
	require.NoError(t, err)
	defer reservedRoot.Close()
	for _, s := range []scope.Scope{root, child, reserved, reservedRoot} {
		info, ok := s.Info()
		require.True(t, ok)
		assert.Equal(t, here, firstFunction(info.Stack), "scope %s", info.Name)
	}

	_, err = child.Alloc(4096)
	require.NoError(t, err)
	_, err = reserved.Alloc(4096)
	require.NoError(t, err)
	_, err = child.OwnResource(scope.Resource{Kind: "stream", End: func() error { return nil }})
	require.NoError(t, err)
	for _, s := range []scope.Scope{child, reserved} {
		info, ok := s.Info()
		require.True(t, ok)
		require.Len(t, info.Allocations, 1)
		assert.Equal(t, here, firstFunction(info.Allocations[0].Stack), "allocation in %s", info.Name)
	}
	info, ok := child.Info()
	require.True(t, ok)
	require.Len(t, info.Resources, 1)
	assert.Equal(t, here, firstFunction(info.Resources[0].Stack), "resource")
}
