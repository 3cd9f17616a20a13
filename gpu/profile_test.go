package gpu_test

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

//go:noinline
func loadWeights(s *gpu.Scope) (gpu.Buffer, error) { return s.Alloc(24 << 20) }

func TestProfileNamesTheFunctionsThatHoldMemory(t *testing.T) {
	dev := openHost(t)
	gpu.RecordStacks(true) // as TestMain does: this test does not rely on it
	weights, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	defer weights.Close()
	_, err = loadWeights(weights)
	require.NoError(t, err)
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(1 << 20)
		return err
	}, gpu.Name("batch"))
	require.NoError(t, err)

	var buf bytes.Buffer
	require.NoError(t, dev.WriteProfile(&buf))
	if out := os.Getenv("GPU_PROFILE_OUT"); out != "" {
		// .ci/run reads it with go tool pprof -top.
		require.NoError(t, os.WriteFile(out, buf.Bytes(), 0o644))
	}
	p, err := profile.Parse(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.NoError(t, p.CheckValid())
	require.Len(t, p.Sample, 1, "the batch's buffer was freed with its scope")
	s := p.Sample[0]
	assert.Equal(t, []int64{1, 24 << 20}, s.Value, "one buffer, its bytes")
	assert.Equal(t, []string{"weights"}, s.Label["scope"])
	assert.Contains(t, s.Location[0].Line[0].Function.Name, "loadWeights", "the innermost frame is the user's allocation")

}

func TestProfileWithoutStacksNamesScopes(t *testing.T) {
	gpu.RecordStacks(false) // TestMain records stacks
	defer gpu.RecordStacks(true)
	dev := openHost(t)
	weights, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	defer weights.Close()
	_, err = weights.Alloc(4096)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, dev.WriteProfile(&buf))
	p, err := profile.Parse(&buf)
	require.NoError(t, err)
	require.Len(t, p.Sample, 1)
	assert.Contains(t, p.Sample[0].Location[0].Line[0].Function.Name, "(scope weights, stack not recorded)")
}
