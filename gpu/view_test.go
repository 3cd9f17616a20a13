package gpu_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

func TestViewsReadAndWriteTheirPart(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := gpu.Alloc[int32](s, 8)
		require.NoError(t, err)
		require.NoError(t, x.CopyFromHost([]int32{0, 1, 2, 3, 4, 5, 6, 7}))
		mid, err := x.View(2, 6)
		require.NoError(t, err)
		assert.Equal(t, 4, mid.Len())
		assert.Equal(t, int64(16), mid.Size())
		assert.True(t, mid.IsView())
		assert.False(t, x.IsView())
		assert.Equal(t, x.Ptr()+8, mid.Ptr())
		got := make([]int32, 4)
		require.NoError(t, mid.CopyToHost(got))
		assert.Equal(t, []int32{2, 3, 4, 5}, got)

		require.NoError(t, mid.CopyFromHost([]int32{20, 30}))
		inner, err := mid.View(1, 3) // a view of a view: elements 3 and 4 of x
		require.NoError(t, err)
		require.NoError(t, inner.Memset(0))
		all := make([]int32, 8)
		require.NoError(t, x.CopyToHost(all))
		assert.Equal(t, []int32{0, 1, 20, 0, 0, 5, 6, 7}, all)
		assert.Error(t, mid.CopyFromHost(make([]int32, 5)), "a copy is bounded by the view")

		b, err := s.Alloc(100)
		require.NoError(t, err)
		v, err := b.View(10, 20)
		require.NoError(t, err)
		require.NoError(t, v.Use(func(ptr uintptr) error {
			assert.Equal(t, b.Ptr()+10, ptr)
			return nil
		}))
		whole, err := b.View(0, 100)
		require.NoError(t, err)
		assert.Equal(t, b, whole, "a view of all of it is the buffer")
		return nil
	}))
}

func TestBadViewsAreErrors(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(100)
		require.NoError(t, err)
		for _, c := range [][2]int64{{-1, 10}, {0, 0}, {0, 101}, {90, 11}, {101, 1}, {50, -1}, {1 << 62, 1 << 62}} {
			_, err := b.View(c[0], c[1])
			assert.ErrorIs(t, err, gpu.ErrInvalidSize, "View(%d, %d)", c[0], c[1])
		}
		x, err := gpu.Alloc[float64](s, 4)
		require.NoError(t, err)
		for _, c := range [][2]int{{-1, 2}, {2, 2}, {3, 1}, {0, 5}} {
			_, err := x.View(c[0], c[1])
			assert.ErrorIs(t, err, gpu.ErrInvalidSize, "View(%d, %d)", c[0], c[1])
		}
		_, err = gpu.Buffer{}.View(0, 1)
		assert.ErrorIs(t, err, gpu.ErrWrongScope)
		_, err = gpu.Slice[int8]{}.View(0, 1)
		assert.ErrorIs(t, err, gpu.ErrWrongScope)

		v, err := b.View(0, 10)
		require.NoError(t, err)
		assert.ErrorIs(t, s.Free(v), gpu.ErrWrongScope, "a view is not freed itself")
		require.NoError(t, b.Memset(1), "and its buffer is untouched")
		return nil
	}))
}

func TestViewsEndWithTheirBuffer(t *testing.T) {
	dev := testDevice(t, 0)
	var afterScope gpu.Buffer
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(4096)
		require.NoError(t, err)
		v, err := b.View(1024, 1024)
		require.NoError(t, err)
		require.NoError(t, s.Free(b))
		assert.ErrorIs(t, v.Memset(0), gpu.ErrFreed)
		assert.Zero(t, v.Ptr())
		_, err = b.View(0, 1)
		assert.ErrorIs(t, err, gpu.ErrFreed, "no view of a freed buffer")

		c, err := s.Alloc(4096)
		require.NoError(t, err)
		afterScope, err = c.View(0, 16)
		return err
	}))
	assert.ErrorIs(t, afterScope.CopyFromHost([]byte{1}), gpu.ErrScopeClosed)
}
