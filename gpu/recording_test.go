package gpu_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
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
