package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gunzipped returns a shared trace as plain CSV.
func gunzipped(t *testing.T, name string) []byte {
	t.Helper()
	f, err := os.Open(traceFile(name))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	data, err := io.ReadAll(zr)
	require.NoError(t, err)
	return data
}

// replayed decodes a replay's JSON.
func replayed(t *testing.T, out string) result {
	t.Helper()
	var res result
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	return res
}

func TestReplayReadsStandardInputForEveryPass(t *testing.T) {
	fromFile := runReplay(t, "--repeat", "3", traceFile("mlp_train"))
	for name, data := range map[string][]byte{"plain": gunzipped(t, "mlp_train"), "gzip": mustRead(t, traceFile("mlp_train"))} {
		t.Run("a "+name+" trace", func(t *testing.T) {
			code, out, errb := gpumem(t, bytes.NewReader(data), "replay", "--repeat", "3", "-")
			require.Zero(t, code, errb)
			res := replayed(t, out)
			assert.Equal(t, fromFile.Allocs, res.Allocs, "every pass saw the whole trace")
			assert.Equal(t, fromFile.PeakReservedBytes, res.PeakReservedBytes)
			assert.Len(t, res.Repetitions, 3)
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// A pipe given as a file can be read once: the first pass keeps it for
// the next ones, and plot, which reads a trace three times, draws it all.
func TestAPipeGivenAsAFileIsReadOnceAndKept(t *testing.T) {
	data := gunzipped(t, "mlp_train")
	fifo := func() string {
		p := filepath.Join(t.TempDir(), "trace.fifo")
		require.NoError(t, syscall.Mkfifo(p, 0o600))
		go func() {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			_, _ = f.Write(data)
			_ = f.Close()
		}()
		return p
	}
	fromFile := runReplay(t, "--repeat", "2", traceFile("mlp_train"))
	code, out, errb := gpumem(t, nil, "replay", "--repeat", "2", fifo())
	require.Zero(t, code, errb)
	assert.Equal(t, fromFile.Allocs, replayed(t, out).Allocs)

	svg := filepath.Join(t.TempDir(), "p.svg")
	code, _, errb = gpumem(t, nil, "plot", "-o", svg, fifo())
	require.Zero(t, code, errb)
	want := filepath.Join(t.TempDir(), "want.svg")
	code, _, errb = gpumem(t, nil, "plot", "-o", want, traceFile("mlp_train"))
	require.Zero(t, code, errb)
	got, wanted := string(mustRead(t, svg)), string(mustRead(t, want))
	assert.Equal(t, strings.Count(wanted, "<polygon"), strings.Count(got, "<polygon"))
	assert.Contains(t, got, "memory over 329 events", "the events of the whole trace")
}

// What a command keeps of a trace it reads more than once is bounded.
func TestWhatIsKeptOfAPipeIsBounded(t *testing.T) {
	var out bytes.Buffer
	c := &copier{r: strings.NewReader(strings.Repeat("x", 100)), w: &out, name: "standard input", limit: 64}
	_, err := io.ReadAll(c)
	assert.ErrorContains(t, err, "standard input holds more than 64 B")
	assert.LessOrEqual(t, out.Len(), 64)
}

func TestAnEmptyTraceIsAnError(t *testing.T) {
	for name, trace := range map[string]string{
		"no bytes":       "",
		"a header":       "action,addr,size,stream\n",
		"comments":       "# nothing\n\n# here\n",
		"frees only":     "free_requested,1,64,0\n",
		"pytorch's only": "segment_alloc,1,2097152,0\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "empty.csv")
			require.NoError(t, os.WriteFile(f, []byte(trace), 0o600))
			for _, args := range [][]string{{"replay", f}, {"plot", "-o", filepath.Join(t.TempDir(), "e.svg"), f}} {
				code, out, errb := gpumem(t, nil, args...)
				assert.Equal(t, 1, code, "%q", args)
				assert.Empty(t, out)
				assert.Contains(t, errb, "the trace is empty", "%q", args)
			}
			code, _, errb := gpumem(t, strings.NewReader(trace), "replay", "-")
			assert.Equal(t, 1, code)
			assert.Contains(t, errb, "standard input: no alloc event")
		})
	}
}

func TestADirectoryIsNoTrace(t *testing.T) {
	code, _, errb := gpumem(t, nil, "replay", t.TempDir())
	assert.Equal(t, 1, code)
	assert.Contains(t, errb, "is a directory, not a trace")
}

// Bytes for people carry their unit; the JSON keeps the raw numbers.
func TestByteCountsCarryTheirUnit(t *testing.T) {
	res, err := runReplayOOM(t, "--capacity", "400000000", traceFile("mlp_train"))
	require.Error(t, err)
	assert.Regexp(t, `reserved at most \d+ bytes \(\d+\.\d\d MiB\)`, err.Error())
	assert.Positive(t, res.PeakReservedBytes)
	assert.Equal(t, "467.94 MiB", res.PeakRequested, "beside peak_requested_bytes, %d", res.PeakRequestedBytes)
	assert.NotEmpty(t, res.PeakReserved)
}

// A run whose context ends (an interrupt) stops, saying so, rather than
// take an input cut short for the end of the trace.
func TestAnInterruptedRunSaysItStopped(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, args := range [][]string{{"replay", traceFile("mlp_train")}, {"replay", "-"}, {"plot", "-o", filepath.Join(t.TempDir(), "p.svg"), "-"}} {
		var out, errb bytes.Buffer
		code := exit(&call{ctx: ctx, stdin: strings.NewReader(""), stdout: &out, stderr: &errb}, args)
		assert.Equal(t, 1, code, "%q", args)
		assert.Contains(t, errb.String(), "stopped before the end: context canceled", "%q", args)
	}
	evs := &ctxEvents{ctx: ctx, evs: &sliceEvents{}}
	_, err := evs.Next()
	assert.ErrorIs(t, err, context.Canceled, "the input's end, once the context ended, is no end of the trace")
}
