package gpu_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

func TestTypedSlicesRoundTrip(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := gpu.Alloc[float32](s, 1000)
		require.NoError(t, err)
		assert.Equal(t, 1000, x.Len())
		assert.Equal(t, int64(4000), x.Size())
		in := make([]float32, 1000)
		for i := range in {
			in[i] = float32(i) * 0.5
		}
		require.NoError(t, x.CopyFromHost(in))
		y, err := gpu.Alloc[float32](s, 1000)
		require.NoError(t, err)
		require.NoError(t, y.CopyFrom(x.Buffer))
		out := make([]float32, 1000)
		require.NoError(t, y.CopyToHost(out))
		assert.Equal(t, in, out)
		assert.Error(t, x.CopyFromHost(make([]float32, 1001)))
		require.NoError(t, y.Memset(0))
		require.NoError(t, y.CopyToHost(out))
		assert.Equal(t, make([]float32, 1000), out)
		return nil
	})
	require.NoError(t, err)
}

func TestUseHostWorksInPlaceOnTheHostDevice(t *testing.T) {
	dev := openHost(t)
	var stale gpu.Slice[float32]
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := gpu.Alloc[float32](s, 4)
		require.NoError(t, err)
		require.NoError(t, x.CopyFromHost([]float32{1, 2, 3, 4}))
		require.NoError(t, x.UseHost(func(v []float32) error {
			assert.Equal(t, []float32{1, 2, 3, 4}, v)
			for i := range v {
				v[i] *= 10
			}
			return nil
		}))
		got := make([]float32, 4)
		require.NoError(t, x.CopyToHost(got))
		assert.Equal(t, []float32{10, 20, 30, 40}, got, "the slice was the device memory itself")
		stale = x
		return nil
	}))
	assert.ErrorIs(t, stale.UseHost(func([]float32) error { return nil }), gpu.ErrScopeClosed)
}
