package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu/gputest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m))
}

func runReplay(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	require.NoError(t, run(append([]string{"replay"}, args...), &out, &errb), errb.String())
	var res result
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	return res
}

// The figures of shared/traces/README.md, which these copies come from.
var traces = []struct {
	file          string
	allocs        int
	peakRequested int64
}{
	{"testdata/mlp_train.csv.gz", 166, 490_672_332},
	{"testdata/resnet50_train.csv.gz", 2_539, 5_762_142_352},
}

func TestReplayOfTheSharedTracesWastesLessThanPyTorch(t *testing.T) {
	for _, tr := range traces {
		t.Run(filepath.Base(tr.file), func(t *testing.T) {
			res := runReplay(t, tr.file)
			assert.Equal(t, tr.allocs, res.Allocs)
			assert.Equal(t, tr.peakRequested, res.PeakRequestedBytes, "peak requested must match the README exactly")
			assert.LessOrEqual(t, res.ReservedRatio, 1.03)
			assert.GreaterOrEqual(t, res.ReservedRatio, 1.0)
			assert.Zero(t, res.SourceFrees, "nothing may go back to the source during a default replay")
			assert.LessOrEqual(t, res.SourceAllocs, res.PeakReservedBytes/(2<<20))
			assert.Zero(t, res.OOMs)
			assert.True(t, res.Expandable)
		})
	}
}

func TestReplayWithClassicSegmentsStillRuns(t *testing.T) {
	res := runReplay(t, "--expand", "never", traces[0].file)
	assert.Equal(t, traces[0].peakRequested, res.PeakRequestedBytes)
	assert.False(t, res.Expandable)
	assert.Zero(t, res.OOMs)
}

func TestCapacityFindsTheSmallestDevice(t *testing.T) {
	tr := traces[0]
	t.Run("a device just above the peak runs the trace", func(t *testing.T) {
		res := runReplay(t, "--capacity", "500000000", tr.file)
		assert.Zero(t, res.OOMs)
	})
	t.Run("a device below the peak runs out of memory after releasing and retrying", func(t *testing.T) {
		res := runReplay(t, "--capacity", "400000000", tr.file)
		assert.Positive(t, res.OOMs)
		assert.Positive(t, res.Retries)
	})
	t.Run("classic segments release their cache and retry", func(t *testing.T) {
		res := runReplay(t, "--expand", "never", "--capacity", "520000000", tr.file)
		assert.Positive(t, res.Retries)
		assert.Positive(t, res.SourceFrees)
	})
}

func TestBadTracesNameTheLine(t *testing.T) {
	cases := map[string]struct{ trace, want string }{
		"a malformed line":             {"action,addr,size,stream\nalloc,1,2\n", "line 2"},
		"an unknown action":            {"action,addr,size,stream\nalloc,1,2,0\nrealloc,1,2,0\n", `line 3: unknown action "realloc"`},
		"a negative size":              {"alloc,1,-2,0\n", "line 1"},
		"a double free":                {"alloc,1,64,0\nfree_requested,1,64,0\nfree_requested,1,64,0\n", "line 3: double free of 1, freed at line 2"},
		"an alloc over a live address": {"alloc,1,64,0\nalloc,1,64,0\n", "line 2"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "trace.csv")
			require.NoError(t, os.WriteFile(f, []byte(c.trace), 0o600))
			var out, errb bytes.Buffer
			err := run([]string{"replay", f}, &out, &errb)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestFreesOfAddressesBeforeRecordingAreSkipped(t *testing.T) {
	f := filepath.Join(t.TempDir(), "trace.csv")
	require.NoError(t, os.WriteFile(f, []byte("free_requested,99,64,0\nalloc,1,64,0\nfree_requested,1,64,0\n"), 0o600))
	res := runReplay(t, f)
	assert.Equal(t, 1, res.Allocs)
	assert.Equal(t, 1, res.Frees)
	assert.Equal(t, int64(64), res.PeakRequestedBytes)
}

func TestBadFlagsAreErrors(t *testing.T) {
	for _, args := range [][]string{
		{"replay"},
		{"replay", "--expand", "sometimes", traces[0].file},
		{"replay", "--driver", "tpu", traces[0].file},
		{"replay", "--page-size", "3", traces[0].file},
		{"replay", "--limit", "-5", traces[0].file},
		{"copy", traces[0].file},
	} {
		var out, errb bytes.Buffer
		err := run(args, &out, &errb)
		assert.Error(t, err, strings.Join(args, " "))
	}
}

func TestStressLeavesNothing(t *testing.T) {
	var out, errb bytes.Buffer
	require.NoError(t, run([]string{"stress", "--seconds", "0.3", "--goroutines", "8"}, &out, &errb), errb.String())
	var res stressResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	assert.Positive(t, res.Scopes)
	assert.Positive(t, res.Allocations)
	assert.Zero(t, res.AllocatedAfter)
	assert.Zero(t, res.OpenScopes)
	assert.Error(t, run([]string{"stress", "--driver", "tpu"}, &out, &errb))
}

// writeInferenceTrace writes a trace shaped like LLM inference whose
// sequence length changes with every request: 1 GiB of weights kept, then
// per request a KV cache and per-layer activations sized by the sequence
// length, all freed when the request ends. It is the case where a caching
// allocator with fixed segments reserves far more than it uses.
func writeInferenceTrace(t *testing.T) string {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	b.WriteString("action,addr,size,stream\n")
	next := uint64(1 << 40)
	alloc := func(size int64) [2]int64 {
		a := next
		next += uint64(size) + 4096
		fmt.Fprintf(&b, "alloc,%d,%d,0\n", a, size)
		return [2]int64{int64(a), size}
	}
	free := func(x [2]int64) { fmt.Fprintf(&b, "free_requested,%d,%d,0\n", x[0], x[1]) }
	const hidden = 4096
	for range 32 {
		alloc(hidden * hidden * 2)
	}
	for range 300 {
		seq, batch := int64(16+r.IntN(4080)), int64(1+r.IntN(8))
		var kv [][2]int64
		for range 8 {
			kv = append(kv, alloc(batch*seq*hidden*2))
		}
		for range 6 {
			act := alloc(batch * seq * hidden * 2)
			att := alloc(batch * 32 * min(seq, 1024) * min(seq, 1024) * 2 / 8)
			mlp := alloc(batch * seq * hidden * 8)
			free(att)
			free(mlp)
			free(act)
		}
		for _, x := range kv {
			free(x)
		}
	}
	f := filepath.Join(t.TempDir(), "inference.csv")
	require.NoError(t, os.WriteFile(f, []byte(b.String()), 0o600))
	return f
}

func TestInferenceWithChangingSequenceLengths(t *testing.T) {
	f := writeInferenceTrace(t)
	res := runReplay(t, f)
	assert.LessOrEqual(t, res.ReservedRatio, 1.03, "the default stays close to what is used")
	assert.Zero(t, res.SourceFrees)
	classic := runReplay(t, "--expand", "never", f)
	assert.Greater(t, classic.ReservedRatio, 2.0, "fixed segments reserve over twice what is used, as PyTorch's native allocator does")
	t.Logf("reserved/requested: pages %.4f (%d pages moved), classic segments %.4f", res.ReservedRatio, res.PagesMoved, classic.ReservedRatio)
}
