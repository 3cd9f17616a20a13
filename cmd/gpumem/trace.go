package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// event is one line of an allocation trace.
type event struct {
	line   int
	action string
	addr   uint64
	size   int64
	stream uint64
}

// The actions a trace may hold; a replay uses alloc and free_requested.
var knownActions = map[string]bool{
	"alloc": true, "free_requested": true, "free_completed": true,
	"segment_alloc": true, "segment_free": true,
	"segment_map": true, "segment_unmap": true, "snapshot": true, "oom": true,
}

// readTrace parses a trace in the CSV format of PyTorch's memory history cut
// down to action,addr,size,stream, plain or gzip. A malformed line or an
// unknown action is an error that names the line.
func readTrace(r io.Reader) ([]event, error) {
	br := bufio.NewReader(r)
	if magic, err := br.Peek(2); err == nil && bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var events []event
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if n == 1 && strings.HasPrefix(text, "action,") {
			continue
		}
		f := strings.Split(text, ",")
		if len(f) != 4 {
			return nil, fmt.Errorf("trace line %d: %d fields, want 4 (action,addr,size,stream): %q", n, len(f), text)
		}
		if !knownActions[f[0]] {
			return nil, fmt.Errorf("trace line %d: unknown action %q", n, f[0])
		}
		addr, err1 := strconv.ParseUint(f[1], 10, 64)
		size, err2 := strconv.ParseInt(f[2], 10, 64)
		stream, err3 := strconv.ParseUint(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || size < 0 {
			return nil, fmt.Errorf("trace line %d: addr, size and stream must be non-negative integers: %q", n, text)
		}
		events = append(events, event{line: n, action: f[0], addr: addr, size: size, stream: stream})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	return events, nil
}
