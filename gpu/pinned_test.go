package gpu_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

func TestAsynchronousCopiesThroughPinnedMemory(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		in, err := gpu.AllocHost[float32](s, 1000)
		require.NoError(t, err)
		out, err := gpu.AllocHost[float32](s, 1000)
		require.NoError(t, err)
		require.NoError(t, in.Use(func(v []float32) error {
			for i := range v {
				v[i] = float32(i) / 4
			}
			return nil
		}))
		x, err := gpu.Alloc[float32](s, 1000)
		require.NoError(t, err)
		require.NoError(t, x.CopyFromHostAsync(in, st))
		require.NoError(t, x.CopyToHostAsync(out, st))
		require.NoError(t, st.Synchronize())
		return out.Use(func(v []float32) error {
			for i := range v {
				if v[i] != float32(i)/4 {
					t.Fatalf("element %d came back as %v", i, v[i])
				}
			}
			return nil
		})
	}))
	assert.Zero(t, dev.Stats().Allocated)
}

func TestAsynchronousCopiesWaitForTheirStream(t *testing.T) {
	dev, drv := openTestHost(t)
	var stale gpu.HostSlice[int32]
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		h, err := gpu.AllocHost[int32](s, 4)
		require.NoError(t, err)
		stale = h
		require.NoError(t, h.Use(func(v []int32) error { copy(v, []int32{1, 2, 3, 4}); return nil }))
		x, err := gpu.Alloc[int32](s, 4)
		require.NoError(t, err)
		require.NoError(t, x.Memset(0))
		release, err := drv.Hold(st)
		require.NoError(t, err)
		require.NoError(t, x.CopyFromHostAsync(h, st), "queued: returns while st is held")
		got := make([]int32, 4)
		require.NoError(t, x.CopyToHost(got), "the default stream")
		assert.Equal(t, []int32{0, 0, 0, 0}, got, "the copy has not run")
		release()
		require.NoError(t, st.Synchronize())
		require.NoError(t, x.CopyToHost(got))
		assert.Equal(t, []int32{1, 2, 3, 4}, got)

		big, err := gpu.AllocHost[int32](s, 5)
		require.NoError(t, err)
		assert.Error(t, x.CopyFromHostAsync(big, st), "more elements than the slice")
		assert.ErrorIs(t, x.CopyFromHostAsync(h, nil), gpu.ErrWrongScope)
		_, err = gpu.AllocHost[int32](s, 0)
		assert.ErrorIs(t, err, gpu.ErrInvalidSize)
		return nil
	}))
	assert.ErrorIs(t, stale.Use(func([]int32) error { return nil }), gpu.ErrScopeClosed, "freed with its scope")
	assert.Equal(t, 4, stale.Len())
	var zero gpu.HostSlice[int8]
	assert.True(t, zero.IsZero())
	assert.ErrorIs(t, zero.Use(func([]int8) error { return nil }), gpu.ErrWrongScope)
}

func TestAllocHostOfMoreThanTheMachineHoldsFailsWithoutCrashing(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(64<<20))
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := gpu.AllocHost[byte](s, 1<<40)
		assert.ErrorIs(t, err, gpu.ErrOutOfMemory, "1 TiB")
		_, err = gpu.AllocHost[int64](s, math.MaxInt64/8)
		assert.ErrorIs(t, err, gpu.ErrOutOfMemory, "a count times the element size near MaxInt64")
		_, err = gpu.AllocHost[int64](s, math.MaxInt64/8+1)
		assert.ErrorIs(t, err, gpu.ErrInvalidSize, "one that overflows")
		h, err := gpu.AllocHost[byte](s, 1<<20)
		require.NoError(t, err, "a size that fits")
		assert.Equal(t, 1<<20, h.Len())
		return nil
	}))
}

func TestAllocHostInACancelledScopeFailsWithTheCause(t *testing.T) {
	inBothStackModes(t, func(t *testing.T) {
		dev := openHost(t)
		cause := errors.New("request abandoned")
		ctx, cancel := context.WithCancelCause(context.Background())
		err := gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
			h, err := gpu.AllocHost[byte](s, 4096)
			require.NoError(t, err)
			require.NoError(t, h.Free()) // its record waits for the scope's next AllocHost
			cancel(cause)
			_, err = gpu.AllocHost[byte](s, 4096)
			assert.ErrorIs(t, err, cause, "as Alloc does")
			_, err = s.Alloc(4096)
			assert.ErrorIs(t, err, cause)
			return nil
		})
		assert.ErrorIs(t, err, cause)
	})
}
