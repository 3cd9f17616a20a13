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

// The holders "within the limited scope" are its subtree, found by
// identity: a sibling of the same name (one "request" scope per request)
// holds nothing of it.
func TestALimitsHoldersAreItsOwnSubtreeNotItsNamesakes(t *testing.T) {
	dev := openHost(t)
	err := gpu.WithScope(context.Background(), dev, func(job *gpu.Scope) error {
		return gpu.WithScope(job.Context(), dev, func(sibling *gpu.Scope) error {
			_, err := sibling.Alloc(2 << 20)
			require.NoError(t, err)
			// job's context: a second child of job, open beside the first.
			return gpu.WithScope(job.Context(), dev, func(s *gpu.Scope) error {
				_, err := s.Alloc(512 << 10)
				require.NoError(t, err)
				_, err = s.Alloc(1 << 20)
				return err
			}, gpu.Name("request"), gpu.Limit(1<<20))
		}, gpu.Name("request"))
	}, gpu.Name("job"))
	var oom *gpu.OOMError
	require.ErrorAs(t, err, &oom)
	require.Len(t, oom.Holders, 1, "the limited scope alone, not its namesake: %v", oom.Holders)
	assert.Equal(t, "job/request", oom.Holders[0].Scope)
	assert.Equal(t, int64(512<<10), oom.Holders[0].Bytes)
}

// A reservation refused for a scope that did not open names the path it
// would have had, as every other out-of-memory error names its scope.
func TestARefusedReservationNamesThePath(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(64<<20))
	err := gpu.WithScope(context.Background(), dev, func(parent *gpu.Scope) error {
		return gpu.WithScope(parent.Context(), dev, func(*gpu.Scope) error { return nil },
			gpu.Name("child"), gpu.Reserve(100<<20))
	}, gpu.Name("parent"))
	var oom *gpu.OOMError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, "parent/child", oom.Scope)
	assert.Equal(t, int64(100<<20), oom.Requested)
	assert.Contains(t, err.Error(), `in scope "parent/child"`)
}
