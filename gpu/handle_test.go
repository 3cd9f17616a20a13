package gpu_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// Buffers and Slices are value handles: these tests pin down what a handle
// that outlived its allocation does, in each way it can.

func TestBuffersAreComparableValues(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		a, err := s.Alloc(64)
		require.NoError(t, err)
		b, err := s.Alloc(64)
		require.NoError(t, err)
		c := a
		assert.Equal(t, a, c, "a copy names the same allocation")
		assert.NotEqual(t, a, b)
		seen := map[gpu.Buffer]string{a: "a", b: "b"}
		assert.Equal(t, "a", seen[c])
		assert.False(t, a.IsZero())
		assert.Same(t, dev, a.Device())
		x, err := gpu.Alloc[float32](s, 4)
		require.NoError(t, err)
		y := x
		assert.Equal(t, x, y)
		assert.Equal(t, 4, y.Len())
		return nil
	}))
}

func TestStaleBufferAfterFree(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(4096)
		require.NoError(t, err)
		copyOf := b
		require.NoError(t, s.Free(b))
		for _, h := range []gpu.Buffer{b, copyOf} {
			assert.ErrorIs(t, h.CopyFromHost([]byte{1}), gpu.ErrFreed)
			assert.ErrorIs(t, h.Memset(0), gpu.ErrFreed)
			assert.ErrorIs(t, h.Use(func(uintptr) error { return nil }), gpu.ErrFreed)
			assert.ErrorIs(t, s.Free(h), gpu.ErrFreed, "double free")
			assert.Zero(t, h.Ptr(), "no address for a freed buffer")
			assert.Equal(t, int64(4096), h.Size(), "the size it had")
		}
		return nil
	}))
}

func TestStaleBufferAfterScopeEnd(t *testing.T) {
	dev := testDevice(t, 0)
	var kept gpu.Buffer
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		var err error
		kept, err = s.Alloc(4096)
		return err
	}))
	assert.ErrorIs(t, kept.CopyToHost(make([]byte, 1)), gpu.ErrScopeClosed)
	assert.ErrorIs(t, kept.Use(func(uintptr) error { return nil }), gpu.ErrScopeClosed)
	assert.Zero(t, kept.Ptr())
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		assert.ErrorIs(t, s.Free(kept), gpu.ErrScopeClosed, "a buffer of an ended scope cannot be freed again")
		return nil
	}))
}

func TestStaleBufferAfterItsSlotServesAnother(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		old, err := s.Alloc(4096)
		require.NoError(t, err)
		oldPtr := old.Ptr()
		require.NoError(t, s.Free(old))
		fresh, err := s.Alloc(4096)
		require.NoError(t, err)
		require.Equal(t, oldPtr, fresh.Ptr(), "the same memory serves again")
		require.NotEqual(t, old, fresh, "but it is another buffer")
		require.NoError(t, fresh.CopyFromHost([]byte{42}))
		// Every use of the old handle fails, and none reaches the new one.
		assert.ErrorIs(t, old.CopyFromHost([]byte{7}), gpu.ErrFreed)
		assert.ErrorIs(t, old.Memset(9), gpu.ErrFreed)
		assert.ErrorIs(t, s.Free(old), gpu.ErrFreed)
		assert.ErrorIs(t, s.Keep(old), gpu.ErrFreed)
		got := make([]byte, 1)
		require.NoError(t, fresh.CopyToHost(got))
		assert.Equal(t, byte(42), got[0])
		return nil
	}))
}

func TestKeptHandleStaysValid(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(parent *gpu.Scope) error {
		var b gpu.Buffer
		var x gpu.Slice[int32]
		require.NoError(t, gpu.WithScope(parent.Context(), dev, func(child *gpu.Scope) error {
			var err error
			b, err = child.Alloc(16)
			require.NoError(t, err)
			x, err = gpu.Alloc[int32](child, 4)
			require.NoError(t, err)
			require.NoError(t, x.CopyFromHost([]int32{1, 2, 3, 4}))
			require.NoError(t, child.Keep(b))
			require.NoError(t, child.Keep(x.Buffer))
			assert.ErrorIs(t, child.Free(b), gpu.ErrWrongScope, "the child no longer owns it")
			return nil
		}))
		// The handles the caller holds are the parent's now.
		require.NoError(t, b.Memset(1))
		got := make([]int32, 4)
		require.NoError(t, x.CopyToHost(got))
		assert.Equal(t, []int32{1, 2, 3, 4}, got)
		require.NoError(t, parent.Free(b))
		assert.ErrorIs(t, b.Memset(1), gpu.ErrFreed)
		return nil
	}))
}

func TestStaleScopeAfterItsStateServesAnother(t *testing.T) {
	dev := testDevice(t, 0)
	var stale *gpu.Scope
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		stale = s
		return nil
	}, gpu.Name("first")))
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		// The first scope's state serves this one now (one goroutine, one
		// free state); the stale pointer must not reach it.
		b, err := s.Alloc(64)
		require.NoError(t, err)
		_, err = stale.Alloc(64)
		assert.ErrorIs(t, err, gpu.ErrScopeClosed)
		assert.ErrorIs(t, stale.Free(b), gpu.ErrScopeClosed)
		assert.ErrorIs(t, stale.Keep(b), gpu.ErrScopeClosed)
		assert.NoError(t, stale.Close(), "closing an ended scope does nothing")
		assert.Empty(t, stale.Path())
		assert.Zero(t, stale.Stats())
		assert.ErrorIs(t, context.Cause(stale.Context()), gpu.ErrScopeClosed)
		assert.Equal(t, "second", s.Path(), "the live scope is untouched")
		assert.Equal(t, 1, s.Stats().Allocations)
		return b.Memset(0)
	}, gpu.Name("second")))
	err := gpu.WithScope(stale.Context(), dev, func(*gpu.Scope) error { return nil })
	assert.ErrorIs(t, err, gpu.ErrScopeClosed, "no child opens under an ended scope")
}

func TestRacingFreeUseAndClose(t *testing.T) {
	dev := testDevice(t, 0)
	for range 50 {
		s, err := dev.NewScope()
		require.NoError(t, err)
		bufs := make([]gpu.Buffer, 16)
		for i := range bufs {
			bufs[i], err = s.Alloc(1024)
			require.NoError(t, err)
		}
		var wg sync.WaitGroup
		for _, b := range bufs {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if err := s.Free(b); err != nil {
					assert.ErrorIs(t, err, gpu.ErrScopeClosed)
				}
			}()
			go func() {
				defer wg.Done()
				err := b.Use(func(ptr uintptr) error {
					assert.NotZero(t, ptr)
					return nil
				})
				if err != nil {
					assert.True(t, isEnded(err), "%v", err)
				}
			}()
		}
		wg.Add(1)
		go func() { defer wg.Done(); assert.NoError(t, s.Close()) }()
		wg.Wait()
		for _, b := range bufs {
			assert.True(t, isEnded(b.Memset(0)), "every handle has ended")
		}
		assert.Zero(t, dev.Stats().Allocated, "each buffer ended exactly once")
	}
}

func isEnded(err error) bool {
	return errors.Is(err, gpu.ErrFreed) || errors.Is(err, gpu.ErrScopeClosed)
}
