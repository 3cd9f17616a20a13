package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/pool"
)

// The gpumem commands the docs show run as written, with the trace and
// the output files put in a temporary directory.
func TestTheDocumentedCommandsRun(t *testing.T) {
	cmdLine := regexp.MustCompile("gpumem ((?:plot|replay|summary)[^`\n#]*)")
	var cmds []string
	for _, doc := range []string{"observability.md", "trace-format.md"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "docs", doc))
		require.NoError(t, err)
		for _, m := range cmdLine.FindAllStringSubmatch(string(data), -1) {
			cmds = append(cmds, strings.TrimSpace(m[1]))
		}
	}
	require.NotEmpty(t, cmds)
	dir := t.TempDir()
	ran := 0
	for _, c := range cmds {
		args := strings.Fields(c)
		for i, a := range args {
			switch {
			case a == "TRACE" || strings.HasSuffix(a, ".csv") || strings.HasSuffix(a, ".csv.gz"):
				args[i] = traceFile("mlp_train")
			case strings.HasSuffix(a, ".html") || strings.HasSuffix(a, ".svg"):
				args[i] = filepath.Join(dir, filepath.Base(a))
			}
		}
		if len(args) < 2 {
			continue // the command named in prose, with no trace
		}
		t.Run(c, func(t *testing.T) {
			var stdin io.Reader = strings.NewReader("")
			if slices.Contains(args, "-") { // the trace piped in
				f, err := os.Open(traceFile("mlp_train"))
				require.NoError(t, err)
				defer f.Close()
				stdin = f
			}
			var out, errb bytes.Buffer
			err := dispatch(&call{ctx: t.Context(), stdin: stdin, stdout: &out, stderr: &errb}, args)
			require.NoError(t, err, "gpumem %s: %s", strings.Join(args, " "), errb.String())
		})
		ran++
	}
	assert.GreaterOrEqual(t, ran, 3, "the table's plot, and the two commands of the walk-through")
}

func TestFlagsGoBeforeOrAfterTheFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "after.html")
	var o, e bytes.Buffer
	require.NoError(t, run([]string{"plot", traceFile("mlp_train"), "-o", out}, &o, &e), e.String())
	assert.FileExists(t, out)
	after := runReplay(t, traceFile("mlp_train"), "--expand", "never")
	assert.False(t, after.Expandable, "the flag after the file was read")
	assert.Error(t, run([]string{"replay", traceFile("mlp_train"), traceFile("mlp_train")}, &o, &e), "two files")
	assert.Error(t, run([]string{"stress", "extra"}, &o, &e), "stress takes no file")
}

// replay and plot count the same events: the trace's alloc and
// free_requested lines, once, whatever the repetitions.
func TestReplayAndPlotCountEventsAlike(t *testing.T) {
	file := traceFile("resnet50_train")
	res := runReplay(t, "--repeat", "2", file)
	n, _, _, err := countEvents(openTraceFile(file, io.Discard))
	require.NoError(t, err)
	assert.Equal(t, n, res.Events)
	assert.LessOrEqual(t, res.Allocs/2+res.Frees/2, res.Events, "frees of addresses before recording are events too")
}

func TestATruncatedGzipIsNamedOnce(t *testing.T) {
	data, err := os.ReadFile(traceFile("mlp_train"))
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "cut.csv.gz")
	require.NoError(t, os.WriteFile(f, data[:len(data)/2], 0o600))
	var o, e bytes.Buffer
	err = run([]string{"replay", f}, &o, &e)
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, f)
	assert.Contains(t, msg, "truncated gzip")
	assert.Regexp(t, `line \d+`, msg)
	assert.NotContains(t, msg, "\n", "said once")
	assert.LessOrEqual(t, strings.Count(msg, "EOF"), 1)
}

// A replay remembers frees to report a double free, but only as many as
// it must: a trace of many distinct addresses does not grow its memory.
func TestReplayMemoryIsBoundedByWhatIsLive(t *testing.T) {
	const n = 100_000
	evs := make([]event, 0, 2*n)
	for i := range n {
		addr := uint64(1<<20 + i*4096)
		evs = append(evs, event{Line: 2*i + 1, Action: "alloc", Addr: addr, Size: 512},
			event{Line: 2*i + 2, Action: "free_requested", Addr: addr, Size: 512})
	}
	pl := newPlanner(nil)
	ops, err := pl.plan(evs, nil)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(pl.freed), freedKept, "frees remembered")
	assert.LessOrEqual(t, len(pl.freedFIFO), freedKept)
	assert.Equal(t, int32(1), pl.slots, "one slot, used again by each allocation")
	assert.Len(t, ops, 2*n)

	t.Run("a double free close by is still named", func(t *testing.T) {
		ops, err := pl.plan([]event{{Line: 1, Action: "alloc", Addr: 7, Size: 64}, {Line: 2, Action: "free_requested", Addr: 7},
			{Line: 3, Action: "free_requested", Addr: 7}}, nil)
		assert.ErrorContains(t, err, "line 3: double free of 7, freed at line 2")
		assert.Len(t, ops, 2, "the events before it are planned")
	})
}

// A small gzip that expands to one enormous line fails at the line's
// limit, without reading the line into memory.
func TestAHugeLineFailsAtTheLimit(t *testing.T) {
	f := filepath.Join(t.TempDir(), "huge.csv.gz")
	w, err := os.Create(f)
	require.NoError(t, err)
	zw := gzip.NewWriter(w)
	bw := bufio.NewWriter(zw)
	_, err = bw.WriteString("action,addr,size,stream\nalloc,1,64,0\n")
	require.NoError(t, err)
	chunk := bytes.Repeat([]byte("9"), 1<<20)
	const lineMiB = 256
	for range lineMiB {
		_, err = bw.Write(chunk)
		require.NoError(t, err)
	}
	require.NoError(t, bw.Flush())
	require.NoError(t, zw.Close())
	require.NoError(t, w.Close())

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var o, e bytes.Buffer
	err = run([]string{"replay", f}, &o, &e)
	runtime.ReadMemStats(&after)
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("trace line 3: a record longer than %d bytes", trace.MaxRecordBytes))
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(lineMiB<<20)/4, "the line was never held whole")
}

// A trace with thousands of scopes plots the largest and "other scopes":
// the SVG's size does not grow with the number of scopes.
func TestPlotOfManyScopesIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("action,addr,size,stream,scope\n")
	const scopes = 3000
	for i := range scopes {
		fmt.Fprintf(&b, "alloc,%d,%d,0,layer%d\n", i+1, 4096*(i%97+1), i)
	}
	for i := range scopes {
		fmt.Fprintf(&b, "free_requested,%d,0,0,layer%d\n", i+1, i)
	}
	dir := t.TempDir()
	trace := filepath.Join(dir, "scopes.csv")
	require.NoError(t, os.WriteFile(trace, []byte(b.String()), 0o600))
	out := filepath.Join(dir, "p.svg")
	var o, e bytes.Buffer
	require.NoError(t, run([]string{"plot", "-o", out, trace}, &o, &e), e.String())
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(data), ">"+otherGroup+"<")
	assert.Equal(t, maxGroups, strings.Count(string(data), "<polygon"), "the largest scopes and the others")
	assert.Less(t, len(data), 1<<20, "the SVG stays small")
}

// The time a replay reports is the pool's, not the time spent reading
// and decompressing the trace.
func TestWallTimeExcludesReadingTheTrace(t *testing.T) {
	now := time.Unix(0, 0)
	defer func(c func() time.Time) { clock = c }(clock)
	clock = func() time.Time { return now }
	evs, err := trace.ReadAll(strings.NewReader("alloc,1,64,0\nalloc,2,64,0\nfree_requested,1,64,0\nfree_requested,2,64,0\n"))
	require.NoError(t, err)
	slow := func() (events, func() error, error) {
		return &slowEvents{sliceEvents{evs: evs}, &now}, func() error { return nil }, nil
	}
	src, m, err := newMeter(sim.New(0, 0), nil)
	require.NoError(t, err)
	p, err := pool.New(src, pool.Shards(1))
	require.NoError(t, err)
	defer p.Close()
	res, err := replay(p, slow, m, 2, nil)
	require.NoError(t, err)
	assert.Zero(t, res.WallNs, "each event took an hour to read, and none of it counts")
	assert.Equal(t, 4, res.Events)
}

// slowEvents takes an hour of the test's clock to read each event.
type slowEvents struct {
	sliceEvents
	now *time.Time
}

func (s *slowEvents) Next() (event, error) {
	*s.now = s.now.Add(time.Hour)
	return s.sliceEvents.Next()
}
