package gpu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// Importing gpu publishes nothing: a program that serves the default mux
// shows no /debug/vars (which package expvar registers on import) unless
// it imports expvar itself.
func TestImportingGPUServesNothing(t *testing.T) {
	_ = gpu.Stats{}
	rec := httptest.NewRecorder()
	http.DefaultServeMux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/vars", nil))
	assert.Equal(t, http.StatusNotFound, rec.Code)
}

// gpu.Stats and gpu.ScopeStats are the device's and the scope's own types:
// every counter of the layers below has its field, with its own doc.
func TestStatsHaveEveryCounterOfTheLayersBelow(t *testing.T) {
	for _, c := range []struct{ own, lower reflect.Type }{
		{reflect.TypeFor[gpu.Stats](), reflect.TypeFor[pool.Stats]()},
		{reflect.TypeFor[gpu.ScopeStats](), reflect.TypeFor[scope.Stats]()},
	} {
		for f := range c.lower.Fields() {
			own, ok := c.own.FieldByName(f.Name)
			if assert.True(t, ok, "%s has %s's %s", c.own, c.lower, f.Name) {
				assert.False(t, own.Anonymous, "not embedded")
			}
		}
	}
}

func TestScopeStatsReadAsText(t *testing.T) {
	dev := openHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(64 << 20)
		require.NoError(t, err)
		assert.Equal(t, "live 64.00 MiB (peak 64.00 MiB), 1 buffer, 0 children, limit 1.00 GiB", s.Stats().String())
		return nil
	}, gpu.Limit(1<<30)))
}

// A snapshot's JSON names everything in snake_case and carries the
// counters once.
func TestSnapshotJSONHasOneNamingStyleAndTheStatsOnce(t *testing.T) {
	dev := openHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(4096)
		require.NoError(t, err)
		snap, err := dev.Snapshot()
		require.NoError(t, err)
		data, err := json.Marshal(snap)
		require.NoError(t, err)
		var v any
		require.NoError(t, json.Unmarshal(data, &v))
		snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
		counts := map[string]int{}
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					assert.Regexp(t, snake, k)
					counts[k]++
					walk(e)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			}
		}
		walk(v)
		assert.Equal(t, 1, counts["peak_allocated"], "the stats, once")
		assert.Equal(t, 1, counts["stats"])
		return nil
	}, gpu.Name("batch")))
}

// Every allocation served without a driver call counts as served from the
// cache, not only those of the small-block front cache.
func TestSummaryCountsEveryAllocationServedFromTheCache(t *testing.T) {
	dev := openHost(t)
	for range 10 {
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(4 << 20)
			return err
		}))
	}
	st := dev.Stats()
	assert.Equal(t, int64(10), st.Allocs)
	assert.Equal(t, int64(1), st.Growths, "the first allocation grew the pool")
	assert.Equal(t, int64(9), st.ServedFromCache)
	assert.Contains(t, dev.Summary(), "10 allocations (40.00 MiB), 10 frees (40.00 MiB), 9 served from the cache")
}

// Reserved address space is no memory: a fresh device's statistics are
// zero, as RMM's and PyTorch's are, and a segment counts once memory is
// mapped in it.
func TestAFreshDeviceCountsNoSegments(t *testing.T) {
	dev := openHost(t)
	st := dev.Stats()
	assert.Zero(t, st.Segments, "address space reserved at Open is not a segment")
	assert.Zero(t, st.Reserved)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(1 << 20)
		require.NoError(t, err)
		assert.Equal(t, int64(1), dev.Stats().Segments, "one arena with memory mapped in it")
		return nil
	}))
}
