package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
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
	_, err = gpu.OpenHost(gpu.HostMemory(1 << 20))
	assert.ErrorContains(t, err, "at least 2.00 MiB", "a device smaller than a page could hold nothing")
	small, err := gpu.OpenHost(gpu.HostMemory(2 << 20))
	require.NoError(t, err)
	require.NoError(t, gpu.WithScope(context.Background(), small, func(s *gpu.Scope) error {
		_, err := s.Alloc(12)
		return err
	}), "the smallest device takes an allocation")
	require.NoError(t, small.Close())
	err = gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }, gpu.Reserve(-5))
	assert.ErrorIs(t, err, gpu.ErrInvalidSize)
}

// Each layer words its own errors; where they reach a user of gpu they are
// in gpu's words, once, and match gpu's sentinels as well as their own.
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
			assert.True(t, strings.HasPrefix(msg, c.own.Error()), "%q leads with gpu's words for the cause", msg)
			assert.Equal(t, 1, strings.Count(msg, "gpu:"), "one prefix: %q", msg)
			assert.NotRegexp(t, `(^|: )(scope|pool):`, msg, "in gpu's words only")
		})
	}
	var le *gpu.LimitError
	assert.ErrorAs(t, cases[len(cases)-1].got(), &le, "the typed detail survives the crossing")
	assert.False(t, errors.Is(gpu.ErrFreed, scope.ErrFreed), "gpu's sentinels are its own")
}

// What a newcomer's program meets most, a Limit, a device out of memory, a
// stale handle and a cancelled scope, reads with the cause first
// (docs/observability.md shows each).
func TestErrorsLeadWithTheCause(t *testing.T) {
	gpu.RecordStacks(false) // the messages as docs/observability.md shows them, with no file paths
	dev := openHost(t, gpu.HostMemory(64<<20))
	var shown []string // what the doc must show, in order
	defer func() {
		doc, err := os.ReadFile(filepath.Join("..", "docs", "observability.md"))
		require.NoError(t, err)
		for _, msg := range shown {
			assert.Contains(t, string(doc), "\n"+msg+"\n", "docs/observability.md shows the error as it is")
		}
	}()
	t.Run("a scope's limit", func(t *testing.T) {
		err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(2 << 20)
			require.NoError(t, err)
			return gpu.WithScope(s.Context(), dev, func(in *gpu.Scope) error {
				_, err := in.Alloc(2 << 20)
				return err
			}, gpu.Name("step"))
		}, gpu.Name("batch"), gpu.Limit(3<<20))
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		shown = append(shown, err.Error())
		msg := err.Error()
		assert.True(t, strings.HasPrefix(msg, `gpu: out of memory: the limit of scope "batch" (3.00 MiB) refused 2.00 MiB for scope "batch/step": 2.00 MiB live in it; `+
			`largest holders: scope "batch" 2.00 MiB in 1 buffer`), msg)
		assert.True(t, strings.HasSuffix(msg, `; to fit, free buffers in scope "batch" early (Scope.Free), raise its Limit, or allocate less at once`), msg)
		assert.NotContains(t, msg, "EmptyCache", "the cache is no help against a limit")
		var oom *gpu.OOMError
		require.ErrorAs(t, err, &oom)
		require.NotNil(t, oom.Limit)
		assert.Equal(t, "batch", oom.Limit.Path)
		assert.Equal(t, "batch/step", oom.Scope)
		assert.Nil(t, oom.Device)
		var le *gpu.LimitError
		assert.ErrorAs(t, err, &le, "the cause is there for errors.As")
	})
	t.Run("the device", func(t *testing.T) {
		err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(100 << 20)
			return err
		}, gpu.Name("batch"))
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		shown = append(shown, err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), `gpu: out of memory: device host has no room for 100.00 MiB in scope "batch": `), err.Error())
		assert.Contains(t, err.Error(), "the request is larger than the device")
		assert.NotRegexp(t, `(^|: )(scope|pool):`, err.Error())
		var pe *pool.OOMError
		assert.ErrorAs(t, err, &pe, "the pool's figures are there for errors.As")
	})
	t.Run("a stale handle", func(t *testing.T) {
		var b gpu.Buffer
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) (err error) {
			b, err = s.Alloc(64)
			return err
		}))
		err := b.Memset(0)
		require.ErrorIs(t, err, gpu.ErrScopeClosed)
		shown = append(shown, err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), "gpu: scope closed"), err.Error())
		assert.Equal(t, 1, strings.Count(err.Error(), "gpu:"))
	})
	t.Run("a cancelled scope", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		err := gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
			cancel()
			_, err := s.Alloc(64)
			return err
		}, gpu.Name("job"))
		require.ErrorIs(t, err, context.Canceled)
		shown = append(shown, err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), `gpu: scope "job" cancelled: context canceled`), err.Error())
		assert.NotRegexp(t, `(^|: )(scope|pool):`, err.Error())
	})
	t.Run("an invalid size, in one wording whatever the call", func(t *testing.T) {
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(0)
			assert.EqualError(t, err, "gpu: invalid size: 0 bytes")
			_, err = gpu.Alloc[float32](s, 0)
			assert.EqualError(t, err, "gpu: invalid size: 0 elements of 4 bytes")
			return nil
		}))
	})
}

// A scope opened without a name is named so that a person can find it:
// by the function that opened it where stacks are recorded, and by its ID.
func TestUnnamedScopesHaveNamesAPersonCanFind(t *testing.T) {
	dev := openHost(t)
	for _, record := range []bool{false, true} {
		gpu.RecordStacks(record)
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			snap, err := dev.Snapshot()
			require.NoError(t, err)
			require.Len(t, snap.Scopes, 1)
			id := fmt.Sprint(snap.Scopes[0].ID)
			if record {
				assert.Equal(t, "gpu_test.TestUnnamedScopesHaveNamesAPersonCanFind#"+id, s.Path())
			} else {
				assert.Equal(t, "scope#"+id, s.Path())
			}
			return gpu.WithScope(s.Context(), dev, func(in *gpu.Scope) error {
				assert.Regexp(t, `^`+regexp.QuoteMeta(s.Path())+`/.*#\d+$`, in.Path())
				return nil
			})
		}))
	}
	gpu.RecordStacks(false)
}
