package trace_test

import (
	"bytes"
	"compress/gzip"
	"io"
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
	assert.True(t, strings.HasPrefix(b.String(), trace.Header+"\nalloc,1099511627776,4096,7\n"), b.String())
	got, err := trace.ReadAll(&b)
	require.NoError(t, err)
	for i := range events {
		events[i].Line = i + 2
	}
	assert.Equal(t, events, got)
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
		"alloc,1,64,0\n" + strings.Repeat("x", 4*trace.MaxLineBytes) + "\n": "trace line 2: longer than",
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
