package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
)

func TestBadFrees(t *testing.T) {
	dev := testDevice(t, 0)
	other := openHost(t)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(64)
		require.NoError(t, err)
		require.NoError(t, s.Free(b))
		assert.ErrorIs(t, s.Free(b), gpu.ErrFreed, "double free")
		assert.ErrorIs(t, b.CopyToHost(make([]byte, 1)), gpu.ErrFreed, "use after free")
		err = s.Free(gpu.Buffer{})
		assert.ErrorIs(t, err, gpu.ErrWrongScope, "no scope owns the zero Buffer")
		assert.EqualError(t, err, "gpu: the zero Buffer names no memory: no allocation returned it (a failed one returns it with its error)",
			"it belongs to no scope, not to another")

		c, err := s.Alloc(64)
		require.NoError(t, err)
		err = gpu.WithScope(s.Context(), dev, func(in *gpu.Scope) error {
			assert.ErrorIs(t, in.Free(c), gpu.ErrWrongScope, "freed through the wrong scope")
			return nil
		})
		require.NoError(t, err)
		return gpu.WithScope(context.Background(), other, func(o *gpu.Scope) error {
			assert.ErrorIs(t, o.Free(c), gpu.ErrWrongScope, "freed through another device")
			require.NoError(t, c.CopyFromHost([]byte{7}), "nothing was lost")
			return nil
		})
	})
	require.NoError(t, err)
}

func TestZeroBuffersAreErrorsNotCrashes(t *testing.T) {
	var b gpu.Buffer
	assert.True(t, b.IsZero())
	assert.Nil(t, b.Device())
	assert.Zero(t, b.Size())
	assert.Zero(t, b.Ptr())
	assert.ErrorIs(t, b.CopyFromHost([]byte{1}), gpu.ErrWrongScope)
	assert.ErrorIs(t, b.CopyToHost(make([]byte, 1)), gpu.ErrWrongScope)
	assert.ErrorIs(t, b.Memset(0), gpu.ErrWrongScope)
	assert.ErrorIs(t, b.Use(func(uintptr) error { return nil }), gpu.ErrWrongScope)
	var x gpu.Slice[float32]
	assert.True(t, x.IsZero())
	assert.Zero(t, x.Len())
	assert.ErrorIs(t, x.CopyFromHost([]float32{1}), gpu.ErrWrongScope)
	assert.ErrorIs(t, x.CopyToHost(make([]float32, 1)), gpu.ErrWrongScope)
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		y, err := s.Alloc(8)
		require.NoError(t, err)
		assert.ErrorIs(t, y.CopyFrom(gpu.Buffer{}), gpu.ErrWrongScope)
		assert.ErrorIs(t, s.Keep(gpu.Buffer{}), gpu.ErrWrongScope)
		return nil
	}))
	assert.ErrorIs(t, gpu.WithScope(context.Background(), nil, func(*gpu.Scope) error { return nil }), gpu.ErrNoDevice)
	var nilDev *gpu.Device
	_, err := nilDev.NewScope()
	assert.ErrorIs(t, err, gpu.ErrNoDevice)
	var nilScope *gpu.Scope
	_, err = nilScope.Alloc(8)
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	_, err = gpu.Alloc[int32](nilScope, 8)
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	assert.ErrorIs(t, nilScope.Free(gpu.Buffer{}), gpu.ErrScopeClosed)
	assert.ErrorIs(t, nilScope.Keep(gpu.Buffer{}), gpu.ErrScopeClosed)
	assert.ErrorIs(t, nilScope.Close(), gpu.ErrScopeClosed)
	assert.Error(t, gpu.WithScope(context.Background(), dev, nil))
}

func TestCopyBetweenDevices(t *testing.T) {
	a, b := testDevice(t, 0), openHost(t)
	err := gpu.WithScope(context.Background(), a, func(sa *gpu.Scope) error {
		return gpu.WithScope(context.Background(), b, func(sb *gpu.Scope) error {
			x, err := sa.Alloc(3)
			require.NoError(t, err)
			y, err := sb.Alloc(3)
			require.NoError(t, err)
			require.NoError(t, x.CopyFromHost([]byte("gpu")))
			require.NoError(t, y.CopyFrom(x))
			got := make([]byte, 3)
			require.NoError(t, y.CopyToHost(got))
			assert.Equal(t, "gpu", string(got))
			return nil
		})
	})
	require.NoError(t, err)
}

// An error of the caller's own passes through Use untouched, even one in
// the words, or wrapping a sentinel, of a layer below: only the buffer's
// own state is put in gpu's terms.
func TestUseReturnsTheCallersErrorAsItIs(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(64)
		require.NoError(t, err)
		for _, mine := range []error{
			errors.New("pool: a message of the caller's that starts as the pool's do"),
			fmt.Errorf("scope %q: %w", "mine", pool.ErrInvalidBlock),
			gpu.ErrOutOfMemory,
		} {
			assert.Same(t, mine, b.Use(func(uintptr) error { return mine }))
		}
		v, err := b.View(8, 8)
		require.NoError(t, err)
		require.NoError(t, s.Free(b))
		assert.ErrorIs(t, v.Use(func(uintptr) error { t.Fatal("fn ran on freed memory"); return nil }), gpu.ErrFreed)
		return nil
	}))
}

// A copy longer than its buffer or slice is an invalid size, which the
// caller can test with errors.Is, and changes nothing.
func TestACopyLongerThanItsBufferIsAnInvalidSize(t *testing.T) {
	dev := openHost(t)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := s.Alloc(3)
		require.NoError(t, err)
		y, err := s.Alloc(4)
		require.NoError(t, err)
		require.NoError(t, x.CopyFromHost([]byte("gpu")))
		require.NoError(t, y.CopyFromHost([]byte("four")))
		for _, err := range []error{x.CopyFromHost([]byte("more")), x.CopyToHost(make([]byte, 4)), x.CopyFrom(y)} {
			require.ErrorIs(t, err, gpu.ErrInvalidSize)
			require.ErrorContains(t, err, "-byte buffer")
		}
		got := make([]byte, 3)
		require.NoError(t, x.CopyToHost(got))
		assert.Equal(t, "gpu", string(got), "nothing copied")

		v, err := gpu.Alloc[float32](s, 2)
		require.NoError(t, err)
		require.NoError(t, v.CopyFromHost([]float32{1, 2}))
		for _, err := range []error{v.CopyFromHost([]float32{1, 2, 3}), v.CopyToHost(make([]float32, 3))} {
			require.ErrorIs(t, err, gpu.ErrInvalidSize)
			require.ErrorContains(t, err, "elements")
		}
		out := make([]float32, 2)
		require.NoError(t, v.CopyToHost(out))
		assert.Equal(t, []float32{1, 2}, out, "nothing copied")
		return nil
	})
	require.NoError(t, err)
}
