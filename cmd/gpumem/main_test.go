package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/internal/sim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(sim.Wrap(gputest.Wrap(m)))
}

func runReplay(t *testing.T, args ...string) result {
	t.Helper()
	res, err := runReplayOOM(t, args...)
	require.NoError(t, err)
	return res
}

// runReplayOOM runs a replay that may run out of memory: its JSON, and
// the error that sets the exit status.
func runReplayOOM(t *testing.T, args ...string) (result, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(append([]string{"replay"}, args...), &out, &errb)
	var st *exitStatus
	if err != nil && !errors.As(err, &st) {
		require.NoError(t, err, errb.String())
	}
	var res result
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	return res, err
}

// reference holds what the tests compare a replay with: PyTorch's figures
// for each shared trace, from testdata/pytorch.json.
type reference struct {
	Allocs          int     `json:"allocs"`
	PeakRequested   int64   `json:"peak_requested"`
	NativeMs        float64 `json:"native_ms"`
	NativeRatio     float64 `json:"native_ratio"`
	ExpandableMs    float64 `json:"expandable_ms"`
	ExpandableRatio float64 `json:"expandable_ratio"`
	Floor           float64 `json:"floor"`
	// ExpandableCap is PyTorch expandable's smallest cap on the H200, as
	// a multiple of the peak requested, where the file has it.
	ExpandableCap float64 `json:"expandable_cap"`
}

func references(t *testing.T) map[string]reference {
	t.Helper()
	data, err := os.ReadFile("testdata/pytorch.json")
	require.NoError(t, err)
	var f struct {
		Traces map[string]reference `json:"traces"`
	}
	require.NoError(t, json.Unmarshal(data, &f))
	require.Len(t, f.Traces, 5)
	return f.Traces
}

func traceFile(name string) string { return "testdata/" + name + ".csv.gz" }

func TestBadFlagsAreErrors(t *testing.T) {
	for _, args := range [][]string{
		{"replay"},
		{"replay", "--expand", "sometimes", traceFile("mlp_train")},
		{"replay", "--driver", "tpu", traceFile("mlp_train")},
		{"replay", "--page-size", "3", traceFile("mlp_train")},
		{"replay", "--max-reserved", "-5", traceFile("mlp_train")},
		{"replay", "--repeat", "0", traceFile("mlp_train")},
		{"replay", "--growth-step", "-1", traceFile("mlp_train")},
		{"copy", traceFile("mlp_train")},
	} {
		var out, errb bytes.Buffer
		err := run(args, &out, &errb)
		assert.Error(t, err, strings.Join(args, " "))
	}
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

// gpumem runs gpumem as main does, with stdin on standard input, and
// returns its exit status and what it wrote.
func gpumem(t *testing.T, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = exit(&call{ctx: t.Context(), stdin: stdin, stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

func TestEachCommandPrintsItsOwnHelp(t *testing.T) {
	own := map[string]string{"replay": "-growth-step", "plot": "-width", "summary": "-scopes", "stress": "-goroutines"}
	for name, flagName := range own {
		for _, args := range [][]string{{"help", name}, {name, "-h"}, {name, "--help"}, {name, "-help"}, {name, traceFile("mlp_train"), "-h"}} {
			code, out, errb := gpumem(t, nil, args...)
			require.Zero(t, code, "%q: %s", args, errb)
			assert.Empty(t, errb)
			assert.True(t, strings.HasPrefix(out, "usage: gpumem "+name), "%q begins with its usage:\n%s", args, out)
			assert.Contains(t, out, flagName, "%q lists its flags", args)
			for other, otherFlag := range own {
				if other != name {
					assert.NotContains(t, out, otherFlag, "%q: %s's flags are not %s's", args, other, name)
				}
			}
		}
	}
}

func TestTopLevelHelpListsTheCommandsInAFewLines(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "help"}, {"help", "-h"}} {
		code, out, _ := gpumem(t, nil, args...)
		require.Zero(t, code)
		for _, name := range []string{"replay", "plot", "summary", "stress", "help"} {
			assert.Regexp(t, "(?m)^  "+name+" ", out)
		}
		assert.LessOrEqual(t, strings.Count(out, "\n"), 15, "a few lines")
		assert.NotContains(t, out, "-growth-step", "no command's flags")
	}
}

// A mistake in the arguments is one line that says what is wrong, and
// one that says where the help is: not the error, the usage and the
// error again.
func TestAMistakeIsOneErrorAndAHint(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"copy"},
		{"help", "copy"},
		{"replay"},
		{"replay", "--bogus", traceFile("mlp_train")},
		{"replay", "--repeat"},
		{"replay", "--expand", "sometimes", traceFile("mlp_train")},
		{"replay", "--max-reserved=-5", traceFile("mlp_train")},
		{"replay", traceFile("mlp_train"), traceFile("mlp_train")},
		{"plot", traceFile("mlp_train")},
		{"plot", "-o", "x.png", traceFile("mlp_train")},
		{"stress", "extra"},
		{"stress", "--seconds", "NaN"},
	} {
		code, out, errb := gpumem(t, nil, args...)
		assert.Equal(t, 1, code, "%q", args)
		assert.Empty(t, out, "%q", args)
		lines := strings.Split(strings.TrimSuffix(errb, "\n"), "\n")
		require.Len(t, lines, 2, "%q: %s", args, errb)
		assert.True(t, strings.HasPrefix(lines[0], "gpumem: "), "%q: %s", args, lines[0])
		assert.Regexp(t, `^gpumem: run 'gpumem help( \w+)?' for`, lines[1], "%q", args)
		assert.NotContains(t, errb, "usage:", "%q", args)
	}
}

// An error that is no mistake in the arguments is one line, and no hint.
func TestAFailureIsOneLine(t *testing.T) {
	f := filepath.Join(t.TempDir(), "bad.csv")
	require.NoError(t, os.WriteFile(f, []byte("alloc,1,64,0\nalloc,1,64,0\n"), 0o600))
	for _, args := range [][]string{{"replay", f}, {"replay", filepath.Join(t.TempDir(), "missing.csv")}} {
		code, _, errb := gpumem(t, nil, args...)
		assert.Equal(t, 1, code)
		assert.Equal(t, 1, strings.Count(errb, "\n"), "%q: %s", args, errb)
	}
}

// FuzzArgs runs gpumem on argument vectors (words split at NUL; TRACE is a
// small trace, OUT.svg and the like files in a temporary directory) with
// stdin on standard input. It never panics and ends (its context ends a
// run after a moment); it exits 0 saying nothing on stderr, or fails with
// one line, and for a mistake in the arguments a hint.
func FuzzArgs(f *testing.F) {
	defer func(m int64) { stressMemory = m }(stressMemory)
	stressMemory = 256 << 20 // a fuzzed stress fails for memory rather than take the machine's
	tr := filepath.Join(f.TempDir(), "t.csv")
	require.NoError(f, os.WriteFile(tr, []byte("alloc,1,64,0\nalloc,2,4096,1\nfree_requested,1,64,0\n"), 0o600))
	for _, seed := range []string{
		"replay\x00TRACE", "replay\x00--repeat\x003\x00-", "replay\x00--repeat=2\x00--timeline\x00OUT.csv\x00TRACE",
		"plot\x00-o\x00OUT.svg\x00TRACE", "plot\x00-\x00-o\x00OUT.html", "stress\x00--seconds\x000.01\x00--goroutines\x002",
		"help\x00replay", "replay\x00-h", "replay\x00--max-reserved=-5\x00TRACE", "stress\x00--seconds\x00NaN",
		"replay\x00--page-size\x004611686018427387904\x00TRACE", "replay\x00--capacity\x000\x00TRACE",
		"replay\x00--capacity\x001KiB\x00--expand\x00never\x00TRACE", "replay\x00--driver\x00cuda\x00TRACE", "replay\x00--max-reserved\x0010\x00TRACE", "",
	} {
		f.Add(seed, []byte("alloc,1,64,0\nfree_requested,1,64,0\n"))
	}
	f.Fuzz(func(t *testing.T, argv string, stdin []byte) {
		args := strings.Split(argv, "\x00")
		if argv == "" {
			args = nil
		}
		dir := t.TempDir()
		for i, a := range args {
			switch {
			case a == "TRACE":
				args[i] = tr
			case strings.HasPrefix(a, "OUT."):
				args[i] = filepath.Join(dir, a)
			case strings.ContainsAny(a, `/\`):
				t.Skip("no paths but the fuzz's own: a run writes files")
			}
		}
		t.Chdir(dir) // what a relative path names is the fuzz's
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		var out, errb bytes.Buffer
		code := exit(&call{ctx: ctx, stdin: bytes.NewReader(stdin), stdout: &out, stderr: &errb}, args)
		if code == 0 {
			require.Empty(t, errb.String(), "%q", args)
			return
		}
		require.Contains(t, []int{1, exitOutOfMemory}, code, "%q", args)
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		require.True(t, strings.HasPrefix(lines[0], "gpumem: "), "%q: %s", args, errb.String())
		if len(lines) > 1 {
			require.Len(t, lines, 2, "%q: %s", args, errb.String())
			require.Regexp(t, `^gpumem: run 'gpumem help( \w+)?' for`, lines[1], "%q", args)
		}
	})
}
