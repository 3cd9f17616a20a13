package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/internal/units"
)

// maxSpooled is the most of a piped trace a command keeps, in a temporary
// file, to read it more than once.
const maxSpooled = 4 << 30

// errEmptyTrace is a trace with no allocation to replay or plot.
var errEmptyTrace = errors.New("no alloc event: the trace is empty (its format is in docs/trace-format.md)")

// input is the trace a command reads: open opens it from its start for
// each pass, and close removes what reading it left.
type input struct {
	open  openEvents
	close func() error
}

// openInput opens the trace path names, "-" for standard input, to be read
// passes times. A regular file is read again for each pass. Standard
// input, a pipe or a device can be read only once: with one pass it is
// read as it comes, and with more the first pass keeps a copy, at most
// maxSpooled bytes, in a temporary file for the next ones.
func openInput(ctx context.Context, path string, stdin io.Reader, passes int, progressTo io.Writer) (*input, error) {
	if path == "-" {
		return stream(ctx, stdin, inputName(path), passes, func() error { return nil })
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory, not a trace", path)
	}
	if fi.Mode().IsRegular() {
		return &input{open: withContext(ctx, openTraceFile(path, progressTo)), close: func() error { return nil }}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return stream(ctx, f, path, passes, f.Close)
}

// overwrites returns a usage error of cmd where out, a file cmd would
// write, is the trace it reads: writing would destroy the trace first.
func overwrites(cmd, flagName, out, trace string) error {
	o, err1 := os.Stat(out)
	t, err2 := os.Stat(trace)
	if err1 == nil && err2 == nil && os.SameFile(o, t) {
		return usageErrorf(cmd, "%s %s is the trace it reads: writing it would destroy the trace", flagName, out)
	}
	return nil
}

// inputName is how messages name the trace path names.
func inputName(path string) string {
	if path == "-" {
		return "standard input"
	}
	return path
}

// stream opens a trace that can be read only once.
func stream(ctx context.Context, r io.Reader, name string, passes int, closeR func() error) (*input, error) {
	if passes == 1 {
		used := false
		return &input{open: withContext(ctx, func() (events, func() error, error) {
			if used {
				return nil, nil, fmt.Errorf("bug: %s read twice", name)
			}
			used = true
			t, err := trace.NewReader(r)
			return t, func() error { return nil }, err
		}), close: closeR}, nil
	}
	tmp, err := os.CreateTemp("", "gpumem-*.trace")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("keeping %s to read it again: %w", name, err), closeR())
	}
	s := &spool{r: r, name: name, tmp: tmp}
	return &input{open: withContext(ctx, s.open), close: func() error {
		return errors.Join(closeR(), tmp.Close(), os.Remove(tmp.Name()))
	}}, nil
}

// spool reads a trace once, keeping what it read in a temporary file, and
// serves the later passes from the file.
type spool struct {
	r    io.Reader
	name string
	tmp  *os.File
	read bool // the first pass began
	done bool // the first pass read r to its end: tmp holds it all
}

func (s *spool) open() (events, func() error, error) {
	if !s.read {
		s.read = true
		w := bufio.NewWriter(s.tmp)
		tee := &copier{r: s.r, w: w, name: s.name, limit: maxSpooled}
		t, err := trace.NewReader(tee)
		return t, func() error {
			s.done = tee.eof
			return w.Flush()
		}, err
	}
	if !s.done {
		return nil, nil, fmt.Errorf("%s: the first pass stopped before its end, and it cannot be read again", s.name)
	}
	f, err := os.Open(s.tmp.Name())
	if err != nil {
		return nil, nil, err
	}
	t, err := trace.NewReader(f)
	if err != nil {
		return nil, nil, errors.Join(err, f.Close())
	}
	return t, f.Close, nil
}

// copier passes r's bytes through, writing them to w, up to limit.
type copier struct {
	r     io.Reader
	w     io.Writer
	name  string
	limit int64
	n     int64
	eof   bool
}

func (c *copier) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if c.n += int64(n); c.n > c.limit {
		return 0, fmt.Errorf("%s holds more than %s, the most gpumem keeps of a trace it reads more than once: give it as a file", c.name, units.FormatBytes(c.limit))
	}
	if _, werr := c.w.Write(b[:n]); werr != nil {
		return 0, fmt.Errorf("keeping %s to read it again: %w", c.name, werr)
	}
	c.eof = err == io.EOF
	return n, err
}

// withContext makes each pass of open stop, with ctx's error, once ctx
// ends: between passes, and every ctxEvery events.
func withContext(ctx context.Context, open openEvents) openEvents {
	return func() (events, func() error, error) {
		if err := ctx.Err(); err != nil {
			return nil, nil, stopped(err)
		}
		evs, closeEvents, err := open()
		if err != nil {
			return nil, nil, err
		}
		return &ctxEvents{ctx: ctx, evs: evs}, closeEvents, nil
	}
}

// ctxEvery is how many events a pass reads between looks at its context.
const ctxEvery = 1 << 10

type ctxEvents struct {
	ctx context.Context
	evs events
	n   int
}

func (c *ctxEvents) Next() (event, error) {
	if c.n++; c.n%ctxEvery == 0 {
		if err := c.ctx.Err(); err != nil {
			return event{}, stopped(err)
		}
	}
	ev, err := c.evs.Next()
	if err != nil && c.ctx.Err() != nil {
		return event{}, stopped(c.ctx.Err()) // the end of an input cut short is no end of the trace
	}
	return ev, err
}

// stopped is the error of a run its context ended.
func stopped(err error) error { return fmt.Errorf("stopped before the end: %w", err) }
