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
	require.ErrorIs(t, capi.Allocator{}.Close(), gpu.ErrScopeClosed)
}

func TestAllocatorCloseTwice(t *testing.T) {
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
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.Close(), gpu.ErrScopeClosed)
}
