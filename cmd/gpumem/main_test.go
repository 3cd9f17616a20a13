package main

import (
	"bytes"
	"encoding/json"
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
