package capi_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/capi"
)

// The context form's calls from C threads are tested in
// cmd/libgpuscope/internal/cthreads, where a test may hold C code.

func TestForRefusesAScopeThatIsNot(t *testing.T) {
	_, err := capi.For(nil)
	require.ErrorIs(t, err, gpu.ErrScopeClosed)
}

func TestForGivesTheThreePointers(t *testing.T) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	s, err := dev.NewScope()
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	a, err := capi.For(s)
	require.NoError(t, err)
	require.NotNil(t, a.Ctx)
	require.NotNil(t, a.Alloc)
	require.NotNil(t, a.Free)
	b, err := capi.For(s)
	require.NoError(t, err)
	require.NotEqual(t, a.Ctx, b.Ctx, "each Allocator its own context")
}
