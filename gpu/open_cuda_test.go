//go:build cuda

package gpu_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

func TestOpenCUDA(t *testing.T) {
	devs, err := gpu.Devices()
	require.NoError(t, err)
	require.NotEmpty(t, devs)
	t.Logf("devices: %+v", devs)
	assert.Positive(t, devs[0].TotalMemory)

	_, err = gpu.Open(len(devs))
	assert.ErrorIs(t, err, gpu.ErrNoDevice, "an ordinal past the last device")
	_, err = gpu.Open(0, gpu.HostMemory(1<<20))
	assert.Error(t, err, "HostMemory means nothing to a GPU")

	dev, err := gpu.Open(0)
	require.NoError(t, err)
	defer dev.Close()
	free, total, err := dev.MemInfo()
	require.NoError(t, err)
	assert.Positive(t, free)
	assert.Equal(t, devs[0].TotalMemory, total)
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := gpu.Alloc[float64](s, 1<<20)
		require.NoError(t, err)
		in := make([]float64, 1<<20)
		for i := range in {
			in[i] = float64(i) / 3
		}
		require.NoError(t, x.CopyFromHost(in))
		out := make([]float64, 1<<20)
		require.NoError(t, x.CopyToHost(out))
		assert.Equal(t, in, out)
		return nil
	})
	require.NoError(t, err)
	assert.True(t, dev.Stats().Reserved > 0)
	require.NoError(t, dev.EmptyCache())
	assert.Zero(t, dev.Stats().Reserved)
}

// TestTwoDevicesHaveTheirOwnPools opens GPUs 0 and 1, or GPU 0 twice on a
// machine with one: each device keeps its own pool and scopes, and buffers
// copy between them.
func TestTwoDevicesHaveTheirOwnPools(t *testing.T) {
	a, err := gpu.Open(0)
	require.NoError(t, err)
	defer a.Close()
	second := 0
	if devs, _ := gpu.Devices(); len(devs) > 1 {
		second = 1 // a second GPU, where there is one
	}
	b, err := gpu.Open(second)
	require.NoError(t, err)
	defer b.Close()
	err = gpu.WithScope(context.Background(), a, func(sa *gpu.Scope) error {
		return gpu.WithScope(context.Background(), b, func(sb *gpu.Scope) error {
			x, err := sa.Alloc(1 << 20)
			require.NoError(t, err)
			y, err := sb.Alloc(1 << 20)
			require.NoError(t, err)
			require.NoError(t, x.Memset(7))
			require.NoError(t, y.CopyFrom(x))
			got := make([]byte, 1<<20)
			require.NoError(t, y.CopyToHost(got))
			assert.Equal(t, byte(7), got[0])
			assert.Equal(t, byte(7), got[len(got)-1])
			assert.ErrorIs(t, sb.Free(x), gpu.ErrWrongScope)
			return nil
		})
	})
	require.NoError(t, err)
	assert.NotZero(t, a.Stats().Reserved)
	assert.NotZero(t, b.Stats().Reserved)
}
