// Package trace is the allocation trace format (docs/trace-format.md): one
// writer, which gpu's Recording uses, and one reader, which gpumem's replay
// and plot use.
package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Event is one line of an allocation trace.
type Event struct {
	Line   int // the line of the trace it was read from, from 1; 0 when written
	Action string
	Addr   uint64
	Size   int64
	Stream uint64
	Scope  string // the optional fifth column: the path of the scope that allocated
}

// The actions a replay uses: the program asked for memory, and freed it.
const (
	Alloc = "alloc"
	Free  = "free_requested"
)

// Header is the first line a writer writes, which names every column its
// lines carry. A reader skips a first line that begins "action", so that
// it reads the traces written before the scope column had its name
// ("action,addr,size,stream") as it reads these.
const Header = "action,addr,size,stream,scope"

// knownActions are the actions a trace may hold: Alloc, Free and PyTorch's
// own events, which a reader accepts and a replay ignores.
var knownActions = map[string]bool{
	Alloc: true, Free: true, "free_completed": true,
	"segment_alloc": true, "segment_free": true,
	"segment_map": true, "segment_unmap": true, "snapshot": true, "oom": true,
}

// Known reports whether action is one a trace may hold.
func Known(action string) bool { return knownActions[action] }

// MaxRecordBytes is the longest record a trace may have: a line, or the
// lines a quoted field spans. A trace's records are short (five fields);
// the bound keeps a malformed or hostile file, such as a small gzip that
// expands to one enormous line, or a quoted field left open over millions
// of short lines, from taking memory in proportion to it.
const MaxRecordBytes = 64 << 10

// Reader reads a trace one event at a time, plain or gzip, so that a
// replay's memory does not grow with the trace's length. A malformed line,
// a record longer than MaxRecordBytes, an unknown action or a truncated gzip
// is an error that names the line.
type Reader struct {
	cr    *csv.Reader
	lines *recordLimit
	gzip  bool
	first bool
	last  int // the line of the last event returned
}

// NewReader returns a Reader of r, which holds a trace, plain or gzip.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	t := &Reader{first: true}
	var in io.Reader = br
	if magic, err := br.Peek(2); err == nil && bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("trace: not a readable gzip: %w", err)
		}
		in, t.gzip = zr, true
	}
	t.lines = &recordLimit{r: in, line: 1, atStart: true}
	t.cr = csv.NewReader(bufio.NewReaderSize(t.lines, 1<<16))
	t.cr.Comment = '#'
	t.cr.FieldsPerRecord = -1
	t.cr.TrimLeadingSpace = true
	t.cr.ReuseRecord = true
	return t, nil
}

// Next returns the next event, or io.EOF after the last.
func (t *Reader) Next() (Event, error) {
	for {
		rec, err := t.cr.Read()
		if err == io.EOF {
			return Event{}, io.EOF
		}
		if err != nil {
			return Event{}, t.readError(err)
		}
		// FieldPos is valid only after a successful Read: a failed one
		// leaves no record and FieldPos panics.
		line, _ := t.cr.FieldPos(0)
		first := t.first
		t.first = false
		if first && rec[0] == "action" {
			continue // the header
		}
		if len(rec) < 4 || len(rec) > 5 {
			return Event{}, fmt.Errorf("trace line %d: %d fields, want 4 (action,addr,size,stream) and an optional scope", line, len(rec))
		}
		if !knownActions[rec[0]] {
			return Event{}, fmt.Errorf("trace line %d: unknown action %q", line, rec[0])
		}
		addr, err1 := strconv.ParseUint(rec[1], 10, 64)
		size, err2 := strconv.ParseInt(rec[2], 10, 64)
		stream, err3 := strconv.ParseUint(rec[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || size < 0 {
			return Event{}, fmt.Errorf("trace line %d: addr, size and stream must be non-negative integers", line)
		}
		ev := Event{Line: line, Action: rec[0], Addr: addr, Size: size, Stream: stream}
		if len(rec) == 5 {
			ev.Scope = rec[4]
		}
		t.last = line
		return ev, nil
	}
}

// readError says what went wrong reading the trace, once, with the line.
func (t *Reader) readError(err error) error {
	var long *recordTooLong
	if errors.As(err, &long) {
		return long
	}
	if t.gzip && errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("trace: truncated gzip: the compressed data ends in line %d (the last whole event is on line %d)", t.lines.line, t.last)
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("trace line %d: %v", pe.Line, pe.Err)
	}
	if t.gzip {
		return fmt.Errorf("trace: gzip data after line %d: %w", t.last, err)
	}
	return fmt.Errorf("trace: after line %d: %w", t.last, err)
}

// recordLimit passes a trace's bytes through, counting lines, and fails
// once a record passes MaxRecordBytes. It follows CSV as encoding/csv
// reads it, far enough to know where a record ends: at a line break
// outside quotes. Every quote outside a comment flips "inside quotes":
// in a valid record that is exact (a doubled quote flips twice), and a
// quote CSV does not accept is an error of the CSV reader anyway.
type recordLimit struct {
	r       io.Reader
	line    int  // the line being read, from 1
	first   int  // the line the record began on
	run     int  // bytes of the record so far
	atStart bool // the next byte begins a record
	quoted  bool // inside a quoted field
	comment bool // the record is a comment line
	err     error
}

// recordTooLong is the error of a record longer than MaxRecordBytes.
type recordTooLong struct{ first, line int }

func (e *recordTooLong) Error() string {
	msg := fmt.Sprintf("trace line %d: a record longer than %d bytes, the most a trace record may have", e.first, MaxRecordBytes)
	if e.line > e.first {
		msg += fmt.Sprintf(" (a quoted field open from line %d to line %d)", e.first, e.line)
	}
	return msg
}

func (l *recordLimit) Read(b []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.r.Read(b)
	for _, c := range b[:n] {
		if l.atStart {
			l.atStart, l.first, l.run = false, l.line, 0
			l.comment = c == '#'
		}
		if c == '\n' {
			l.line++
			if !l.quoted {
				l.atStart = true
				continue
			}
		} else if c == '"' && !l.comment {
			l.quoted = !l.quoted
		}
		l.run++
		if l.run > MaxRecordBytes {
			l.err = &recordTooLong{l.first, l.line}
			return n, l.err
		}
	}
	return n, err
}

// ReadAll reads a whole trace into memory: for tests and small traces.
func ReadAll(r io.Reader) ([]Event, error) {
	t, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	var events []Event
	for {
		ev, err := t.Next()
		if err == io.EOF {
			return events, nil
		}
		if err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
}
