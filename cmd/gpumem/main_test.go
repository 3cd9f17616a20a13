package main

import (
	"bytes"
	"encoding/json"
	"errors"
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
}

func references(t *testing.T) map[string]reference {
	t.Helper()
	data, err := os.ReadFile("testdata/pytorch.json")
	require.NoError(t, err)
	var f struct {
		Traces map[string]reference `json:"traces"`
	}
	require.NoError(t, json.Unmarshal(data, &f))
	require.Len(t, f.Traces, 4)
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

func TestHelpPrintsEveryCommandAndExitsWell(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"replay", "-h"}, {"stress", "--help"}} {
		var out, errb bytes.Buffer
		require.NoError(t, run(args, &out, &errb), strings.Join(args, " "))
		assert.Contains(t, out.String(), "usage: gpumem replay")
		assert.Contains(t, out.String(), "flags of replay:")
		assert.Contains(t, out.String(), "-growth-step")
		assert.Contains(t, out.String(), "flags of stress:")
		assert.Contains(t, out.String(), "-goroutines")
	}
}

func TestWrongArgumentsPrintTheCommandsUsageAndFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		flag string
	}{{[]string{"replay"}, "-growth-step"}, {[]string{"plot", "x.csv"}, "-width"}, {[]string{"stress", "x.csv"}, "-goroutines"}} {
		var out, errb bytes.Buffer
		err := run(c.args, &out, &errb)
		require.Error(t, err, strings.Join(c.args, " "))
		assert.Contains(t, errb.String(), "usage: gpumem replay", strings.Join(c.args, " "))
		assert.Contains(t, errb.String(), c.flag, "the command's own flags")
		assert.Empty(t, out.String())
	}
}
