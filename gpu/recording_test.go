package gpu_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/trace"
)

func TestASecondStopLeavesTheNextRecordingRunning(t *testing.T) {
	dev := openHost(t)
	first, err := dev.StartRecording(&bytes.Buffer{})
	require.NoError(t, err)
	require.NoError(t, first.Stop())
	var trace bytes.Buffer
	second, err := dev.StartRecording(&trace)
	require.NoError(t, err)
	require.NoError(t, first.Stop(), "Stop is idempotent")
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(4096)
		return err
	}))
	require.NoError(t, second.Stop())
	lines := strings.Split(strings.TrimSpace(trace.String()), "\n")
	assert.Len(t, lines, 3, "the header, the allocation and its free:\n%s", trace.String())
}

// Each allocation in a recording names the scope that made it, by the path
// the Summary and the Snapshot show: named, nested, unnamed, and a
// reservation (one allocation, of the reserving scope; what is allocated
// inside it is not in the trace). A free names none.
func TestARecordingNamesTheScopeOfEachAllocation(t *testing.T) {
	dev := openHost(t)
	var recorded bytes.Buffer
	rec, err := dev.StartRecording(&recorded)
	require.NoError(t, err)
	train, err := dev.NewScope(gpu.Name("train"))
	require.NoError(t, err)
	_, err = train.Alloc(1 << 20)
	require.NoError(t, err)
	var unnamed string
	require.NoError(t, gpu.WithScope(train.Context(), dev, func(s *gpu.Scope) error {
		unnamed = s.Path()
		_, err := s.Alloc(4096)
		return err
	}))
	require.NoError(t, gpu.WithScope(train.Context(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(8192)
		require.NoError(t, err)
		return gpu.WithScope(s.Context(), dev, func(in *gpu.Scope) error {
			_, err := in.Alloc(512)
			return err
		}, gpu.Name("decode"))
	}, gpu.Name("step"), gpu.Reserve(64<<10)))
	require.NoError(t, train.Close())
	require.NoError(t, rec.Stop())

	events, err := trace.ReadAll(&recorded)
	require.NoError(t, err)
	var allocs []string
	for _, ev := range events {
		if ev.Action == trace.Alloc {
			allocs = append(allocs, ev.Scope)
		} else {
			assert.Empty(t, ev.Scope, "a free, line %d", ev.Line)
		}
	}
	require.Contains(t, unnamed, "train/")
	assert.Equal(t, []string{"train", unnamed, "train/step"}, allocs,
		"the reservation is one allocation of train/step; 8192 and 512 bytes come out of it:\n%s", recorded.String())
}
