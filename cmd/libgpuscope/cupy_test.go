package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTheCupyPairRunsOnAStandIn runs scripts/measure/interop_cupy.py's pair
// part (issue 47's CuPy pair through gpuscope, through the free list in
// CuPy's form and through CuPy's pool) against the host-memory library,
// with testdata/cupystandin in CuPy's place, and reads its line as the
// report does: the GPU run depends on it, and no CuPy is here. Through
// gpuscope, the pairs after the first of each size are the pair cache's:
// CuPy's free stays on the C side too.
func TestTheCupyPairRunsOnAStandIn(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine")
	}
	dir := buildLibrary(t)
	freelist := filepath.Join(t.TempDir(), "interop_freelist.so")
	run(t, "", "gcc", "-O2", "-shared", "-fPIC", "-DFL_HOST", filepath.Join("..", "..", "scripts", "measure", "interop_freelist.c"),
		"-o", freelist)
	standin, err := filepath.Abs(filepath.Join("testdata", "cupystandin"))
	require.NoError(t, err)
	cmd := exec.Command(python, filepath.Join("..", "..", "scripts", "measure", "interop_cupy.py"), "pair", freelist)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+standin, "GPUSCOPE_LIB="+filepath.Join(dir, "libgpuscope.so"),
		"N=200", "ROUNDS=3", "PYTHONDONTWRITEBYTECODE=1", "GPUSCOPE_BUILD_DIR="+t.TempDir())
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var line map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(out, &line), "%s", out)
	// As on a GPU, use_cupy's function is compiled and reads the stream
	// from CuPy's record of the thread (the stand-in's, a C object as Cython's).
	require.JSONEq(t, `"C, the stream from CuPy's record of the thread"`, string(line["callable"]))
	for _, size := range []string{"256", "1048576", "67108864"} {
		var modes map[string]struct {
			Median    float64 `json:"median_ns"`
			PairHits  int64   `json:"pair_hits"`
			PairAlloc int64   `json:"pair_allocs"`
			Failures  int64   `json:"c_failures"`
		}
		require.NoError(t, json.Unmarshal(line[size], &modes), "size %s", size)
		assert.Len(t, modes, 4, "size %s: pool, freelist, gpuscope and gpuscope without use_cupy's check", size)
		for k, m := range modes {
			assert.Positive(t, m.Median, "size %s, %s", size, k)
		}
		g := modes["gpuscope"] // its counters are both gpuscope modes'
		assert.Equal(t, int64(2*3*200), g.PairAlloc, "size %s: every timed pair went to the cache", size)
		assert.Equal(t, g.PairAlloc-1, g.PairHits, "size %s: the cache served all but the first (reading the stats before emptied it)", size)
		assert.Zero(t, g.Failures)
	}
}

// TestTheCupyCallBenchRuns runs scripts/measure/cupy_call_bench.py, whose
// figures docs/interop.md cites, for a few calls: each form of use_cupy's
// function is timed, the compiled ones included.
func TestTheCupyCallBenchRuns(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine")
	}
	cmd := exec.Command(python, filepath.Join("..", "..", "scripts", "measure", "cupy_call_bench.py"), "1000")
	cmd.Env = append(os.Environ(), "PYTHONPATH=python", "PYTHONDONTWRITEBYTECODE=1", "GPUSCOPE_BUILD_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, row := range []string{"stand-in malloc alone", "python", "c, get_current_stream", "c, capsule", "c, record"} {
		assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(row)+` +[0-9.]+ ns`, string(out))
	}
}
