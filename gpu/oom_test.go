package gpu_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

func TestOutOfMemoryLeaksNothing(t *testing.T) {
	dev := testDevice(t, 64<<20)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		a, err := s.Alloc(40 << 20)
		require.NoError(t, err)
		_, err = s.Alloc(40 << 20)
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		var oom *gpu.OOMError
		require.ErrorAs(t, err, &oom)
		assert.Equal(t, int64(40<<20), oom.Requested)
		if gpu.CUDA {
			assert.Equal(t, int64(64<<20), oom.Device.Limit)
		} else {
			assert.Equal(t, int64(64<<20), oom.Device.DeviceTotal)
		}
		assert.Equal(t, 1, s.Stats().Allocations, "the failed allocation is not tracked")
		assert.Equal(t, int64(40<<20), s.Stats().Live)
		return s.Free(a)
	})
	require.NoError(t, err)
	assert.Zero(t, dev.Stats().Allocated)
}
