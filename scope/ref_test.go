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

func TestWithPtrPassesTheAddressOffBytesInWhileTheAllocationIsLive(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Stream: 7})
	require.NoError(t, err)
	defer s.Close()
	r, err := s.Alloc(4096)
	require.NoError(t, err)

	var ptr, stream uintptr
	require.NoError(t, r.WithPtr(256, func(p, _ uintptr) error { ptr = p; return nil }))
	assert.Equal(t, r.Ptr()+256, ptr)
	require.NoError(t, r.WithPtr(512, func(p, st uintptr) error { ptr, stream = p, st; return nil }))
	assert.Equal(t, r.Ptr()+512, ptr)
	assert.Equal(t, uintptr(7), stream, "the stream the allocation's scope orders its work on")

	fnErr := errors.New("fn's own error")
	assert.Equal(t, fnErr, r.WithPtr(0, func(_, _ uintptr) error { return fnErr }), "what fn returns, as it is")

	require.NoError(t, s.Free(r))
	called := false
	assert.ErrorIs(t, r.WithPtr(0, func(_, _ uintptr) error { called = true; return nil }), errdefs.Freed)
	assert.ErrorIs(t, r.WithPtr(0, func(uintptr, uintptr) error { called = true; return nil }), errdefs.Freed)
	assert.False(t, called, "fn is not called once the allocation has ended")
}

// Ptr is the address WithPtr passes while the allocation is live, and 0
// once it has ended: also after its slot and memory serve another
// allocation, and after its scope ended.
func TestPtrIsTheAddressWhileLiveAndZeroAfter(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	r, err := s.Alloc(4096)
	require.NoError(t, err)
	var ptr uintptr
	require.NoError(t, r.WithPtr(0, func(p, _ uintptr) error { ptr = p; return nil }))
	require.NotZero(t, ptr)
	assert.Equal(t, ptr, r.Ptr())

	require.NoError(t, s.Free(r))
	again, err := s.Alloc(4096) // the same slot, most likely the same memory
	require.NoError(t, err)
	assert.Zero(t, r.Ptr(), "a freed allocation's handle, its slot reused")
	assert.NotZero(t, again.Ptr())
	require.NoError(t, s.Close())
	assert.Zero(t, again.Ptr(), "an allocation of a scope that ended")
	assert.Zero(t, scope.Ref{}.Ptr(), "the zero Ref")
}
