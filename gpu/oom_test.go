package gpu_test

import (
	"context"
	"strings"
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

// What an out-of-memory error advises fits its cause: freeing buffers early
// or emptying the cache cannot make room for a request larger than the
// device, the pool's cap or a Limit, and such an error does not say so.
func TestTheAdviceOfAnOutOfMemoryErrorFitsItsCause(t *testing.T) {
	gpu.RecordStacks(false) // shorter messages; the advice is the same
	defer gpu.RecordStacks(true)
	const freeing = "free buffers"
	cases := []struct {
		name    string
		opts    []gpu.DeviceOption
		limit   int64
		held    int64 // bytes live in the scope before the request
		request int64
		advice  string
		never   []string
	}{
		{"a request larger than the device", nil, 0, 4 << 20, 100 << 20,
			"; to fit, allocate less at once (smaller batches), or use a device with more memory", []string{freeing, "EmptyCache", "cached"}},
		{"a device its buffers fill", nil, 0, 48 << 20, 32 << 20,
			"; to fit, free buffers early, put a Limit on the scopes that grow, or use smaller batches", nil},
		{"a request larger than a Limit", nil, 8 << 20, 0, 16 << 20,
			`; to fit, raise the Limit of scope "outer" above the request, or allocate less at once`, []string{freeing}},
		{"a Limit its buffers fill", nil, 8 << 20, 6 << 20, 4 << 20,
			`; to fit, free buffers in scope "outer" early (Scope.Free), raise its Limit, or allocate less at once`, nil},
		{"a request larger than the cap", []gpu.DeviceOption{gpu.MaxReserved(16 << 20)}, 0, 0, 20 << 20,
			"; to fit, raise the cap above the request, or use smaller batches", []string{freeing}},
		{"a cap its buffers fill", []gpu.DeviceOption{gpu.MaxReserved(16 << 20)}, 0, 12 << 20, 8 << 20,
			"; to fit, raise the cap, free buffers early, or use smaller batches", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := openHost(t, append(c.opts, gpu.HostMemory(64<<20))...)
			var opts []gpu.ScopeOption
			if c.limit > 0 {
				opts = append(opts, gpu.Limit(c.limit))
			}
			err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				if c.held > 0 {
					_, err := s.Alloc(c.held)
					require.NoError(t, err)
				}
				_, err := s.Alloc(c.request)
				return err
			}, append(opts, gpu.Name("outer"))...)
			require.ErrorIs(t, err, gpu.ErrOutOfMemory)
			msg := err.Error()
			assert.True(t, strings.HasSuffix(msg, c.advice), "%s\nwants the advice %q", msg, c.advice)
			for _, not := range c.never {
				assert.NotContains(t, msg, not, "advice that cannot help")
			}
		})
	}
}
