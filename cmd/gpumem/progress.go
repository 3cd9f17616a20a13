package main

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/gpuscope/gpuscope/internal/trace"
)

// openTraceFile opens path for one pass of a replay, reading it as it goes.
// Where out is a terminal, a pass that takes more than a second shows a
// progress bar on it, by bytes of the file read.
func openTraceFile(path string, out io.Writer) openEvents {
	return func() (events, func() error, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		var r io.Reader = f
		var p *progress
		if isTerminal(out) {
			if fi, err := f.Stat(); err == nil {
				p = &progress{r: f, out: out, total: fi.Size(), start: time.Now()}
				r = p
			}
		}
		t, err := trace.NewReader(r)
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		return t, func() error {
			p.finish()
			return f.Close()
		}, nil
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress counts the bytes read through it and, once a second has passed,
// shows them on a bar.
type progress struct {
	r     io.Reader
	out   io.Writer
	total int64
	start time.Time
	read  int64
	bar   *progressbar.ProgressBar
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.read += int64(n)
	if p.bar == nil && time.Since(p.start) > time.Second {
		p.bar = progressbar.NewOptions64(p.total, progressbar.OptionSetWriter(p.out),
			progressbar.OptionShowBytes(true), progressbar.OptionSetDescription("replaying"),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	if p.bar != nil {
		_ = p.bar.Set64(p.read)
	}
	return n, err
}

func (p *progress) finish() {
	if p != nil && p.bar != nil {
		_ = p.bar.Finish()
	}
}
