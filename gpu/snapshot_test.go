package gpu_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
)

func TestSummaryListsScopesWithTheirBytes(t *testing.T) {
	dev := openHost(t)
	weights, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	defer weights.Close()
	_, err = weights.Alloc(3 << 20)
	require.NoError(t, err)
	err = gpu.WithScope(weights.Context(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(1 << 20)
		require.NoError(t, err)
		sum := dev.Summary()
		assert.Contains(t, sum, "device host:")
		assert.Contains(t, sum, "allocated")
		assert.Contains(t, sum, "2 scopes open")
		lines := strings.Split(sum, "\n")
		var weightsLine, childLine int
		for i, l := range lines {
			if strings.Contains(l, "weights") {
				weightsLine = i
				assert.Contains(t, l, "4.00 MiB", "its bytes with its child's")
				assert.Contains(t, l, "1 buffer (3.00 MiB)")
			}
			if strings.Contains(l, "    batch") {
				childLine = i
				assert.Contains(t, l, "1.00 MiB")
			}
		}
		assert.Greater(t, childLine, weightsLine, "the child is listed under its parent")
		return nil
	}, gpu.Name("batch"))
	require.NoError(t, err)
}

func TestSnapshotRoundTripsThroughJSON(t *testing.T) {
	dev := openHost(t)
	gpu.RecordStacks(true)
	defer gpu.RecordStacks(false)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(5000)
		require.NoError(t, err)
		snap, err := dev.Snapshot()
		require.NoError(t, err)
		data, err := json.Marshal(snap)
		require.NoError(t, err)
		var back gpu.Snapshot
		require.NoError(t, json.Unmarshal(data, &back))
		for i := range snap.Scopes {
			for j := range snap.Scopes[i].Buffers {
				snap.Scopes[i].Buffers[j].Key = gpu.BufferSnapshot{}.Key // an identity, for this process only
			}
		}
		assert.Equal(t, *snap, back)
		require.Len(t, back.Scopes, 1)
		assert.Equal(t, "request", back.Scopes[0].Path)
		require.Len(t, back.Scopes[0].Buffers, 1)
		assert.Equal(t, int64(5000), back.Scopes[0].Buffers[0].Size)
		assert.Contains(t, back.Scopes[0].Buffers[0].AllocatedAt[0], "TestSnapshotRoundTripsThroughJSON", "where it was allocated")
		var mapped int64
		for _, seg := range back.Pool.Segments {
			for _, b := range seg.Blocks {
				if b.State != pool.BlockUnmapped {
					mapped += b.Size
				}
			}
		}
		assert.Equal(t, back.Stats.Reserved, mapped+back.Pool.IdleBytes, "block sizes add up to Reserved")
		return nil
	}, gpu.Name("request"))
	require.NoError(t, err)
}

func TestStatsReadAsText(t *testing.T) {
	dev := openHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(3 << 20)
		require.NoError(t, err)
		text := dev.Stats().String()
		assert.Contains(t, text, "allocated 3.00 MiB (peak 3.00 MiB)")
		assert.Contains(t, text, "1 buffer live, 1 scope open")
		var b strings.Builder
		slog.New(slog.NewTextHandler(&b, nil)).Info("gpu", "stats", dev.Stats())
		assert.Contains(t, b.String(), "stats.allocated=3145728")
		return nil
	}))
	assert.Equal(t, int64(3<<20), dev.Stats().PeakAllocated)
	dev.ResetPeaks()
	assert.Zero(t, dev.Stats().PeakAllocated, "the peak starts again from what is live")
}

func TestAnOutOfMemoryErrorNamesTheHolders(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(64<<20))
	gpu.RecordStacks(true)
	defer gpu.RecordStacks(false)
	weights, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	defer weights.Close()
	_, err = weights.Alloc(50 << 20)
	require.NoError(t, err)
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(30 << 20)
		return err
	}, gpu.Name("batch"))
	require.ErrorIs(t, err, gpu.ErrOutOfMemory)
	var oom *gpu.OOMError
	require.ErrorAs(t, err, &oom, "the detail is still there")
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, `gpu: out of memory: device host:0 has no room for 30.00 MiB in scope "batch"`), msg)
	assert.Contains(t, msg, `scope "weights" 50.00 MiB in 1 buffer`)
	assert.Contains(t, msg, "TestAnOutOfMemoryErrorNamesTheHolders", "and where it was allocated")
	assert.Contains(t, msg, "largest allocation sites:")
	require.NotEmpty(t, oom.Holders, "the holders are fields, not only text")
	assert.Equal(t, "weights", oom.Holders[0].Scope)
	assert.Equal(t, int64(50<<20), oom.Holders[0].Bytes)
	require.NotEmpty(t, oom.Sites)
	assert.Contains(t, oom.Sites[0].Site, "TestAnOutOfMemoryErrorNamesTheHolders")
	assert.Nil(t, oom.Limit, "the device refused it, not a limit")
	require.NotNil(t, oom.Device)
}

func TestTheOutOfMemoryObserverMayEmptyTheCache(t *testing.T) {
	var seen []error
	var dev *gpu.Device
	dev = openHost(t, gpu.HostMemory(64<<20), gpu.OnOutOfMemory(func(err error) {
		seen = append(seen, err)
		assert.NoError(t, dev.EmptyCache(), "called with no pool lock held")
	}))
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(100 << 20)
		return err
	}, gpu.Name("too-big"))
	require.ErrorIs(t, err, gpu.ErrOutOfMemory)
	require.Len(t, seen, 1)
	assert.Contains(t, seen[0].Error(), `scope "too-big"`)
	_, err = gpu.OpenHost(gpu.OnOutOfMemory(nil))
	assert.Error(t, err)
}

func TestStatsMarshalAsTheDevicesStats(t *testing.T) {
	dev := openHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(1 << 20)
		require.NoError(t, err)
		// What docs/observability.md passes to expvar.Publish.
		data, err := json.Marshal(dev.Stats())
		require.NoError(t, err)
		var st map[string]int64
		require.NoError(t, json.Unmarshal(data, &st))
		assert.Equal(t, int64(1<<20), st["allocated"])
		assert.Equal(t, int64(1), st["open_scopes"], "the device's stats, scopes included")
		return nil
	}))
}

func TestSummaryListsTheTreeOfScopesNotTheirNames(t *testing.T) {
	dev := openHost(t)
	var sum string
	// Two requests, each with a decode child, and a name with spaces.
	request := func(ctx context.Context, inner func() error) error {
		return gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
			return gpu.WithScope(s.Context(), dev, func(*gpu.Scope) error { return inner() }, gpu.Name("decode"))
		}, gpu.Name("request"))
	}
	require.NoError(t, request(context.Background(), func() error {
		return request(context.Background(), func() error {
			return gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error {
				sum = dev.Summary()
				return nil
			}, gpu.Name("GET v1 infer"))
		})
	}))
	assert.Contains(t, sum, "5 scopes open")
	assert.Equal(t, 2, strings.Count(sum, "decode"), "one decode scope under each request:\n%s", sum)
	assert.Contains(t, sum, "  GET v1 infer ", "a name with spaces is listed whole:\n%s", sum)
}
