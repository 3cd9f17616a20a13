package trace_test

import (
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/trace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWhatTheWriterWritesTheReaderReads(t *testing.T) {
	events := []trace.Event{
		{Action: trace.Alloc, Addr: 1 << 40, Size: 4096, Stream: 7},
		{Action: trace.Alloc, Addr: 2, Size: 64, Scope: "model/layer 1"},
		{Action: trace.Alloc, Addr: 3, Size: 64, Scope: `odd, "quoted"`},
		{Action: trace.Alloc, Addr: 4, Size: 64, Scope: "#not a comment"},
		{Action: trace.Free, Addr: 1 << 40, Size: 4096, Stream: 7},
		{Action: "segment_alloc", Addr: 5, Size: 2 << 20},
	}
	var b bytes.Buffer
	w := trace.NewWriter(&b)
	require.NoError(t, w.WriteHeader())
	for _, ev := range events {
		require.NoError(t, w.Write(ev))
	}
	require.NoError(t, w.Flush())
	assert.True(t, strings.HasPrefix(b.String(), trace.Header+"\nalloc,1099511627776,4096,7,\n"), b.String())
	got, err := trace.ReadAll(bytes.NewReader(b.Bytes()))
	require.NoError(t, err)
	for i := range events {
		events[i].Line = i + 2
	}
	assert.Equal(t, events, got)
}

// The header names every column the lines carry, as a CSV reader that
// aligns fields by the header (pandas, Python's csv.DictReader) needs:
// every line has as many fields as the header, the scope empty where an
// event has none.
func TestEveryLineHasTheColumnsTheHeaderNames(t *testing.T) {
	var b bytes.Buffer
	w := trace.NewWriter(&b)
	require.NoError(t, w.WriteHeader())
	require.NoError(t, w.Write(trace.Event{Action: trace.Alloc, Addr: 1, Size: 64, Scope: "a, b"}))
	require.NoError(t, w.Write(trace.Event{Action: trace.Free, Addr: 1, Size: 64}))
	require.NoError(t, w.Flush())
	records, err := csv.NewReader(&b).ReadAll() // FieldsPerRecord 0: as many as the first line
	require.NoError(t, err, "every line has the header's fields")
	assert.Equal(t, [][]string{
		{"action", "addr", "size", "stream", "scope"},
		{"alloc", "1", "64", "0", "a, b"},
		{"free_requested", "1", "64", "0", ""},
	}, records)
}

// A trace written before the scope column had its name in the header is
// read as it was.
func TestTheReaderReadsTheOldHeader(t *testing.T) {
	got, err := trace.ReadAll(strings.NewReader("action,addr,size,stream\nalloc,1,64,0,step\nfree_requested,1,64,0\n"))
	require.NoError(t, err)
	assert.Equal(t, []trace.Event{
		{Line: 2, Action: trace.Alloc, Addr: 1, Size: 64, Scope: "step"},
		{Line: 3, Action: trace.Free, Addr: 1, Size: 64},
	}, got)
}

func TestTheWriterRefusesWhatTheReaderWouldNot(t *testing.T) {
	w := trace.NewWriter(io.Discard)
	assert.ErrorContains(t, w.Write(trace.Event{Action: "malloc"}), `unknown action "malloc"`)
	assert.ErrorContains(t, w.Write(trace.Event{Action: trace.Alloc, Size: -1}), "negative size")
}

func TestTheReaderNamesTheLineOfABadEvent(t *testing.T) {
	for in, want := range map[string]string{
		"alloc,1,64\n": "trace line 1: 3 fields",
		"action,addr,size,stream\nmalloc,1,64,0\n": `trace line 2: unknown action "malloc"`,
		"alloc,1,-64,0\n":                          "trace line 1: addr, size and stream must be non-negative integers",
		"alloc,1,64,0\n" + strings.Repeat("x", 4*trace.MaxRecordBytes) + "\n": "trace line 2: a record longer than",
	} {
		_, err := trace.ReadAll(strings.NewReader(in))
		assert.ErrorContains(t, err, want)
	}
}

func TestTheReaderReadsGzipAndSaysWhenItIsTruncated(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write([]byte("alloc,1,64,0\nfree_requested,1,64,0\n"))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	got, err := trace.ReadAll(bytes.NewReader(gz.Bytes()))
	require.NoError(t, err)
	assert.Len(t, got, 2)
	_, err = trace.ReadAll(bytes.NewReader(gz.Bytes()[:gz.Len()-4]))
	assert.ErrorContains(t, err, "truncated gzip")
}

// endless yields head, then body over and over, n times: a large input
// that is never in memory.
type endless struct {
	head, body []byte
	n          int
}

func (e *endless) Read(p []byte) (int, error) {
	if len(e.head) > 0 {
		k := copy(p, e.head)
		e.head = e.head[k:]
		return k, nil
	}
	if e.n == 0 {
		return 0, io.EOF
	}
	k := copy(p, e.body)
	if k == len(e.body) {
		e.n--
	} else {
		e.body = e.body[k:] // a short buffer: the rest next time
	}
	return k, nil
}

// One quoted field may span lines, but the bound is on the record, not
// on each line: a field left open over millions of short lines fails at
// MaxRecordBytes, without being held.
func TestAQuotedFieldOverManyLinesFailsAtTheBound(t *testing.T) {
	const lines = 2_000_000
	in := &endless{head: []byte("alloc,1,64,0\nalloc,2,64,0,\"open"), body: []byte("x\n"), n: lines}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := trace.ReadAll(in)
	runtime.ReadMemStats(&after)
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("trace line 2: a record longer than %d bytes", trace.MaxRecordBytes))
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(2*lines)/4, "the record was never held whole")
	assert.Positive(t, in.n, "reading stopped at the bound, not at the end")
}

// What bounds a record leaves alone the records CSV allows: a quoted
// field with a line break, and a comment with an odd quote in it.
func TestRecordsOverLinesAndQuotesInCommentsStillRead(t *testing.T) {
	in := "# a \"comment\" with an odd quote: \"\n" +
		"alloc,1,64,0,\"two\nlines\"\n" +
		"alloc,2,64,0, \"after a space\"\n" +
		"free_requested,1,64,0\n" + strings.Repeat("# a short comment\n", 10_000)
	got, err := trace.ReadAll(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, "two\nlines", got[0].Scope)
	assert.Equal(t, "after a space", got[1].Scope)
	assert.Equal(t, 5, got[2].Line)
}
