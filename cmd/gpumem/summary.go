package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/internal/units"
)

const summaryUsage = `usage: gpumem summary [flags] FILE
       gpumem summary [flags] -        (the trace on standard input)

summary reads an allocation trace (docs/trace-format.md: what your own
program's Device.StartRecording writes, or scripts/torch2trace.py makes of
a PyTorch snapshot) and prints what it holds, for a person: its events,
the most it holds live and at which line, what it leaves live at its end,
its largest allocation, its streams, and the scopes whose live bytes peak
highest, where the trace names them. It replays nothing: gpumem replay runs
the trace through the pool, gpumem plot draws it.
`

// summaryOptions are the flags of summary.
type summaryOptions struct {
	scopes int
}

func (o *summaryOptions) declare(fs *flag.FlagSet) {
	intVar(fs, &o.scopes, "scopes", 10, 1, 1000, "list at most this many `scopes`, those whose live bytes peak highest")
}

func (o *summaryOptions) run(c *call) error {
	if len(c.args) != 1 {
		return usageErrorf("summary", "summary needs one trace FILE (or - for standard input), %s", gotArgs(c))
	}
	file := c.args[0]
	in, err := openInput(c.ctx, file, c.stdin, 1, c.stderr)
	if err != nil {
		return err
	}
	s, err := summarize(in.open, o.scopes)
	if err = errors.Join(err, in.close()); err != nil {
		return fmt.Errorf("%s: %w", inputName(file), err)
	}
	s.write(c.stdout, inputName(file))
	return nil
}

// traceSummary is what a trace holds, as summary prints it.
type traceSummary struct {
	allocs, frees, others int   // the trace's lines: allocations, frees, PyTorch's other events
	peak                  int64 // the most bytes live at once
	peakLine              int   // the line of the event that reached it
	liveAllocs            int   // allocations never freed in the trace
	liveBytes             int64
	largest               int64 // the largest allocation, and its line
	largestLine           int
	streams               int
	scopes                []scopePeak // the scopes that peak highest, largest first
	moreScopes            bool        // the trace names more scopes than listed
}

// scopePeak is a scope and the most bytes live in it at once.
type scopePeak struct {
	name string
	peak int64
}

// summarize reads a trace once, checking it as a replay does (the
// planner), and counts what summary prints. Its memory is bounded by what
// the trace holds live.
func summarize(open openEvents, top int) (traceSummary, error) {
	var s traceSummary
	evs, closeEvents, err := open()
	if err != nil {
		return s, err
	}
	pl := newPlanner(nil)
	scopes := newScopePeaks(top + 1) // one more, to know whether there are more
	scopeOf := map[uint64]string{}   // a live allocation's scope
	chunk := make([]event, 0, chunkEvents)
	ops := make([]op, 0, chunkEvents)
	for err == nil {
		chunk, err = readChunk(evs, chunk[:0])
		if err != nil && err != io.EOF {
			break
		}
		s.count(chunk, scopes, scopeOf)
		var perr error
		if ops, perr = pl.plan(chunk, ops[:0]); perr != nil {
			err = perr
			break
		}
		for _, o := range ops {
			if o.requested > s.peak {
				s.peak, s.peakLine = o.requested, o.line
			}
		}
	}
	if err == io.EOF {
		err = nil
	}
	if err == nil && pl.allocs == 0 {
		err = errEmptyTrace
	}
	s.liveAllocs, s.liveBytes, s.streams = len(pl.live), pl.bounds.bytes, len(pl.bounds.streams)
	for name, peak := range scopes.peak { // exact for the top+1 that peak highest
		s.scopes = append(s.scopes, scopePeak{name, peak})
	}
	slices.SortFunc(s.scopes, func(a, b scopePeak) int { return cmp.Or(cmp.Compare(b.peak, a.peak), cmp.Compare(a.name, b.name)) })
	if len(s.scopes) > top || scopes.dropped {
		s.scopes, s.moreScopes = s.scopes[:min(top, len(s.scopes))], true
	}
	return s, errors.Join(err, closeEvents())
}

// count counts a chunk's events, the largest allocation and the bytes
// each scope holds live.
func (s *traceSummary) count(chunk []event, scopes *scopePeaks, scopeOf map[uint64]string) {
	for _, ev := range chunk {
		switch ev.Action {
		case trace.Alloc:
			s.allocs++
			if ev.Size > s.largest {
				s.largest, s.largestLine = ev.Size, ev.Line
			}
			if ev.Scope != "" {
				scopeOf[ev.Addr] = scopes.alloc(ev.Scope, ev.Size)
			}
		case trace.Free:
			s.frees++
			if g, ok := scopeOf[ev.Addr]; ok {
				scopes.free(g, ev.Size)
				delete(scopeOf, ev.Addr)
			}
		default:
			s.others++
		}
	}
}

// write prints the summary of the trace named name.
func (s traceSummary) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s: %s, %s", name, units.Count(s.allocs, "alloc"), units.Count(s.frees, "free"))
	if s.others > 0 {
		fmt.Fprintf(w, ", %s (PyTorch's, which a replay ignores)", units.Count(s.others, "other event"))
	}
	fmt.Fprintf(w, "\n  peak live:     %s, at line %d\n", units.WithBytes(s.peak), s.peakLine)
	fmt.Fprintf(w, "  live at end:   %s", units.Count(s.liveAllocs, "allocation"))
	if s.liveAllocs > 0 {
		fmt.Fprintf(w, ", %s, never freed in the trace", units.WithBytes(s.liveBytes))
	}
	fmt.Fprintf(w, "\n  largest:       %s, at line %d\n", units.WithBytes(s.largest), s.largestLine)
	fmt.Fprintf(w, "  streams:       %d\n", s.streams)
	if len(s.scopes) == 0 {
		fmt.Fprintln(w, "  scopes:        none named (the trace has no scope column)")
		return
	}
	more := ""
	if s.moreScopes {
		more = fmt.Sprintf(", the %d that peak highest", len(s.scopes))
	}
	fmt.Fprintf(w, "  scopes%s, by the most each held live at once:\n", more)
	width := 0
	for _, sc := range s.scopes {
		width = max(width, len(strconv.Quote(sc.name)))
	}
	for _, sc := range s.scopes {
		fmt.Fprintf(w, "    %-*s  %s\n", width, strconv.Quote(sc.name), units.FormatBytes(sc.peak))
	}
}
