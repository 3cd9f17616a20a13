package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/pool"
)

func replayRecorded(t *testing.T, recorded []byte) result {
	t.Helper()
	events, err := trace.ReadAll(bytes.NewReader(recorded))
	require.NoError(t, err)
	src, m, err := newMeter(sim.New(0, 0), sim.H200)
	require.NoError(t, err)
	p, err := pool.New(src, pool.Shards(1))
	require.NoError(t, err)
	res, err := replay(p, inMemory(events), m, 1, nil)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	return res
}

func TestARecordedWorkloadReplaysWithTheSamePeak(t *testing.T) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	defer dev.Close()
	var recorded bytes.Buffer
	rec, err := dev.StartRecording(&recorded)
	require.NoError(t, err)
	_, err = dev.StartRecording(&bytes.Buffer{})
	assert.Error(t, err, "one recording at a time")

	r := rand.New(rand.NewPCG(1, 2))
	var live, peak int64
	allocs := 0
	for step := range 50 {
		err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			var held []gpu.Buffer
			for range 1 + r.IntN(8) {
				n := int64(1 + r.IntN(8<<20))
				b, err := s.Alloc(n)
				if err != nil {
					return err
				}
				allocs++
				live += n
				peak = max(peak, live)
				held = append(held, b)
				if r.IntN(3) == 0 {
					i := r.IntN(len(held))
					live -= held[i].Size()
					require.NoError(t, s.Free(held[i]))
					held = append(held[:i], held[i+1:]...)
				}
			}
			for _, b := range held {
				live -= b.Size()
			}
			return nil
		})
		require.NoError(t, err, "step %d", step)
	}
	require.NoError(t, rec.Stop())
	require.NoError(t, rec.Stop(), "Stop is idempotent")
	res := replayRecorded(t, recorded.Bytes())
	assert.Equal(t, allocs, res.Allocs)
	assert.Equal(t, peak, res.PeakRequestedBytes, "the replay needs what the workload did")
}

func TestRecordingManyGoroutinesGivesAReplayableOrder(t *testing.T) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	defer dev.Close()
	var recorded bytes.Buffer
	rec, err := dev.StartRecording(&recorded)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				_ = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
					_, err := s.Alloc(int64(512 * (1 + (g+i)%7)))
					return err
				})
			}
		}()
	}
	wg.Wait()
	require.NoError(t, rec.Stop())
	res := replayRecorded(t, recorded.Bytes())
	assert.Equal(t, 1600, res.Allocs)
	assert.Equal(t, 1600, res.Frees, "a block is freed in the trace before it is handed out again")
}

// A device's recording names its scopes, and `gpumem plot` stacks the
// memory of the recording by them.
func TestPlotOfARecordingStacksByScope(t *testing.T) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	defer dev.Close()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "recorded.csv"))
	require.NoError(t, err)
	rec, err := dev.StartRecording(f)
	require.NoError(t, err)
	weights, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	_, err = weights.Alloc(4 << 20)
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, gpu.WithScope(weights.Context(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(2 << 20)
			return err
		}, gpu.Name("batch")))
	}
	require.NoError(t, weights.Close())
	require.NoError(t, rec.Stop())
	require.NoError(t, f.Close())

	out := filepath.Join(dir, "p.svg")
	var o, e bytes.Buffer
	require.NoError(t, run([]string{"plot", "-o", out, f.Name()}, &o, &e), e.String())
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(data), ">weights<")
	assert.Contains(t, string(data), ">weights/batch<")
	assert.NotContains(t, string(data), "(no scope)")
}
