package gpu_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

func TestBadSizes(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		for _, n := range []int64{0, -1, math.MinInt64, math.MaxInt64, 1 << 50} {
			_, err := s.Alloc(n)
			assert.ErrorIs(t, err, gpu.ErrInvalidSize, "size %d", n)
		}
		_, err := gpu.Alloc[float64](s, math.MaxInt64/4)
		assert.ErrorIs(t, err, gpu.ErrInvalidSize, "an element count that overflows")
		_, err = gpu.Alloc[float64](s, -3)
		assert.ErrorIs(t, err, gpu.ErrInvalidSize)
		b, err := s.Alloc(4)
		require.NoError(t, err)
		assert.Error(t, b.CopyFromHost(make([]byte, 5)), "a copy past the end")
		assert.Error(t, b.CopyToHost(make([]byte, 5)))
		return nil
	})
	require.NoError(t, err)
	_, err = gpu.OpenHost(gpu.HostMemory(-1))
	assert.Error(t, err)
	err = gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }, gpu.Reserve(-5))
	assert.ErrorIs(t, err, gpu.ErrInvalidSize)
}

// Each layer words its own errors; where they reach a user of gpu they match
// gpu's sentinels as well as their own, and keep their message.
func TestErrorsFromBelowMatchGPUSentinels(t *testing.T) {
	dev := openHost(t)
	cases := []struct {
		name  string
		got   func() error
		own   error // gpu's sentinel
		lower error // the sentinel of the layer that made it
	}{
		{"double free", func() error {
			return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				b, err := s.Alloc(64)
				require.NoError(t, err)
				require.NoError(t, s.Free(b))
				return s.Free(b)
			})
		}, gpu.ErrFreed, scope.ErrFreed},
		{"use after the scope", func() error {
			var kept gpu.Buffer
			require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) (err error) {
				kept, err = s.Alloc(64)
				return err
			}))
			return kept.Memset(0)
		}, gpu.ErrScopeClosed, scope.ErrClosed},
		{"keep in a root", func() error {
			return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				b, err := s.Alloc(64)
				require.NoError(t, err)
				return s.Keep(b)
			})
		}, gpu.ErrNotKept, scope.ErrNotKept},
		{"free through another scope", func() error {
			return gpu.WithScope(context.Background(), dev, func(a *gpu.Scope) error {
				b, err := a.Alloc(64)
				require.NoError(t, err)
				return gpu.WithScope(context.Background(), dev, func(other *gpu.Scope) error { return other.Free(b) })
			})
		}, gpu.ErrWrongScope, scope.ErrWrongScope},
		{"negative size", func() error {
			return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				_, err := s.Alloc(-1)
				return err
			})
		}, gpu.ErrInvalidSize, pool.ErrInvalidSize},
		{"past a scope's limit", func() error {
			return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				_, err := s.Alloc(4096)
				return err
			}, gpu.Limit(1024))
		}, gpu.ErrOutOfMemory, pool.ErrOutOfMemory},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.got()
			require.Error(t, err)
			assert.ErrorIs(t, err, c.own)
			assert.ErrorIs(t, err, c.lower)
			msg := err.Error()
			assert.False(t, strings.HasPrefix(msg, "gpu: gpu:"), msg)
			prefix, _, _ := strings.Cut(msg, ":")
			assert.Contains(t, []string{"gpu", "scope", "pool"}, prefix, "%q names the layer that made it", msg)
		})
	}
	var le *gpu.LimitError
	assert.ErrorAs(t, cases[len(cases)-1].got(), &le, "the typed detail survives the crossing")
	assert.False(t, errors.Is(gpu.ErrFreed, scope.ErrFreed), "gpu's sentinels are its own")
}
