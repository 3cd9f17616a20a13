package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
	"github.com/gpuscope/gpuscope/gpu"
)

func TestMain(m *testing.M) { demotest.Main(m) }

// small is the test's configuration: the program's loop, layers and batch,
// with hidden layers of 64 (the default 1024 takes half a minute on two
// cores, minutes under -race) and a larger learning rate to match.
var small = []string{"-hidden", "64", "-steps", "150", "-lr", "0.01", "-log-every", "50", "-checkpoint-every", "50"}

func train(t *testing.T, args ...string) string {
	t.Helper()
	cfg, err := parseFlags(flag.NewFlagSet("train", flag.ContinueOnError), args)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, run(&out, cfg))
	t.Log(out.String())
	return out.String()
}

// figure returns the number the pattern's group matches in out.
func figure(t *testing.T, out, pattern string) float64 {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(out)
	require.NotNil(t, m, "no %q in the output", pattern)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

func TestTrainsWithMemoryFlatAfterTheFirstStep(t *testing.T) {
	dir := t.TempDir()
	ckpt, trace := filepath.Join(dir, "ckpt"), filepath.Join(dir, "trace.csv")
	out := train(t, append(small, "-checkpoint", ckpt, "-trace", trace)...)

	// It learns: well above chance (10%), near the ceiling (100%).
	assert.Greater(t, figure(t, out, `test accuracy after 150 steps: ([0-9.]+)%`), 85.0)
	first, last := figure(t, out, `loss fell from ([0-9.]+) to`), figure(t, out, `loss fell from [0-9.]+ to ([0-9.]+)`)
	assert.Less(t, last, first/4)

	// Memory: the weights and moments between steps, the same after every
	// step; the peak is them plus the largest scope of the loop; nothing after.
	assert.Contains(t, out, "allocated between steps: 72.00 KiB after each of 150 steps: flat true")
	assert.Regexp(t, `peak allocated \S+ \S+ = weights and moments 72.00 KiB \+ the largest scope beside them .*: true`, out)
	for _, step := range []string{"1", "50", "100", "150"} {
		assert.Regexp(t, `step +`+step+` .* allocated 72.00 KiB\n`, out)
	}
	assert.Contains(t, out, "after the scopes: 0 buffers live, allocated 0 B, 0 scopes open")

	// Three checkpoints through a child scope, the last one on disk: the
	// weights, biases and both moments of the 16-64-64-10 model.
	assert.Equal(t, 3, strings.Count(out, `through scope "train/weights/checkpoint"`))
	params := 16*64 + 64 + 64*64 + 64 + 64*10 + 10
	st, err := os.Stat(ckpt)
	require.NoError(t, err)
	assert.Equal(t, int64(4*3*params), st.Size())

	// The trace has every allocation and free of the run.
	b, err := os.ReadFile(trace)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	assert.Equal(t, "action,addr,size,stream,scope", lines[0])
	assert.Equal(t, strings.Count(string(b), "\nalloc,"), strings.Count(string(b), "\nfree_requested,"))
	assert.Greater(t, len(lines), 150*16*2)
}

func TestGradientAccumulationKeepsTheStepFlat(t *testing.T) {
	out := train(t, "-hidden", "64", "-steps", "40", "-lr", "0.01", "-accum", "3", "-log-every", "40", "-checkpoint-every", "0")
	assert.Contains(t, out, "step: 3 micro-batch(es) of 256 rows")
	assert.Greater(t, figure(t, out, `test accuracy after 40 steps: ([0-9.]+)%`), 50.0)
	assert.Contains(t, out, "allocated between steps: 72.00 KiB after each of 40 steps: flat true")
	assert.Contains(t, out, "after the scopes: 0 buffers live, allocated 0 B, 0 scopes open")
}

func TestBenchTimesEachAllocator(t *testing.T) {
	out := train(t, "-hidden", "32", "-steps", "1", "-checkpoint-every", "0", "-test", "256",
		"-bench", "scopes,upfront", "-bench-steps", "2", "-bench-rounds", "1")
	assert.Contains(t, out, "bench: 1 rounds of 2 steps per allocator, 16 allocations per step")
	assert.Regexp(t, `bench scopes +step +[0-9.]+ µs`, out)
	assert.Regexp(t, `bench upfront +step +[0-9.]+ µs`, out)
	assert.Regexp(t, `bench scopes +costs [-+][0-9.]+ µs per step over allocating up front`, out)
	assert.Contains(t, out, "after the scopes: 0 buffers live, allocated 0 B, 0 scopes open")

	if !gpu.CUDA {
		cfg, err := parseFlags(flag.NewFlagSet("train", flag.ContinueOnError),
			[]string{"-hidden", "32", "-steps", "1", "-test", "256", "-bench", "direct"})
		require.NoError(t, err)
		assert.ErrorContains(t, run(io.Discard, cfg), "-bench direct allocates with cuMemAllocAsync: build with -tags cuda")
	}
}

func TestBadFlagsAreErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-steps", "0"}, "-steps 0: must be positive"},
		{[]string{"-batch", "-1"}, "-batch -1: must be positive"},
		{[]string{"-layers", "1"}, "-layers 1: need at least 2"},
		{[]string{"-classes", "1"}, "-classes 1: need at least 2"},
		{[]string{"-lr", "0"}, "-lr 0: must be positive"},
		{[]string{"-capacity", "0"}, "-capacity 0: must be positive"},
		{[]string{"-checkpoint-every", "-2"}, "must not be negative"},
		{[]string{"-bench", "scopes,pytorch"}, `unknown allocator "pytorch"`},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		_, err := parseFlags(flag.NewFlagSet("train", flag.ContinueOnError), tc.args)
		assert.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}

func TestAMissingPTXFileIsAnError(t *testing.T) {
	cfg, err := parseFlags(flag.NewFlagSet("train", flag.ContinueOnError), []string{"-ptx", filepath.Join(t.TempDir(), "none.ptx")})
	require.NoError(t, err)
	assert.ErrorIs(t, run(io.Discard, cfg), os.ErrNotExist)
}
