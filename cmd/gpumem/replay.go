package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/pool"
)

// result is what a replay prints, as one JSON object.
type result struct {
	Trace              string  `json:"trace"`
	Driver             string  `json:"driver"`
	Expandable         bool    `json:"expandable"`
	Events             int     `json:"alloc_and_free_events"`
	Allocs             int     `json:"allocs"`
	Frees              int     `json:"frees"`
	PeakRequestedBytes int64   `json:"peak_requested_bytes"`
	PeakAllocatedBytes int64   `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64   `json:"peak_reserved_bytes"`
	ReservedRatio      float64 `json:"reserved_ratio"`
	SourceAllocs       int64   `json:"source_allocs"`
	SourceFrees        int64   `json:"source_frees"`
	PagesMoved         int64   `json:"pages_moved"`
	CacheHits          int64   `json:"cache_hits"`
	OOMs               int64   `json:"ooms"`
	Retries            int64   `json:"retries"`
	Growths            int64   `json:"growths"`
	NsPerOp            float64 `json:"ns_per_op"`
	// Driver calls over the whole replay, by kind, and their time: measured
	// with --driver cuda, modelled from sim.H200 with --driver sim.
	tally
	DriverNsModelled bool `json:"driver_ns_modelled"`
	// WallNs is the time of the trace's pool calls; reading and planning
	// the trace, and the frees of what each pass leaves live (counted in
	// the driver's calls, not timed), are excluded. With --driver sim it is
	// modelled: the measured time, less the time spent in the simulated
	// source, plus the modelled driver time.
	WallNs      int64        `json:"wall_ns"`
	Repetitions []repetition `json:"repetitions"`
}

// repetition is one pass over the trace.
type repetition struct {
	tally
	WallNs int64 `json:"wall_ns"`
}

// event is one line of a trace, as internal/trace reads it.
type event = trace.Event

// events yields a trace's events one at a time; io.EOF ends them.
type events interface{ Next() (event, error) }

// openEvents opens a trace's events from the start, for one pass.
type openEvents func() (events, func() error, error)

// sliceEvents serves events from memory: tests and fuzzing.
type sliceEvents struct {
	evs []event
	i   int
}

func (s *sliceEvents) Next() (event, error) {
	if s.i == len(s.evs) {
		return event{}, io.EOF
	}
	s.i++
	return s.evs[s.i-1], nil
}

// inMemory opens evs for each pass.
func inMemory(evs []event) openEvents {
	return func() (events, func() error, error) {
		return &sliceEvents{evs: evs}, func() error { return nil }, nil
	}
}

// chunkEvents is the most events a replay reads ahead of timing them: the
// trace is read in chunks of this many events outside the timed region,
// so that reading and decompressing it is not counted, and memory stays
// bounded whatever the trace's length.
const chunkEvents = 1 << 16

// clock is what a replay times itself with; tests replace it.
var clock = time.Now

// replay runs the alloc and free_requested events of a trace through p,
// repeat times; between repetitions it frees what the trace left live,
// untimed, as the C++ replay of PyTorch's allocator does. Frees of
// addresses the trace never allocated (made before recording began) are
// skipped; an allocation that fails with ErrOutOfMemory is counted and its
// free skipped, and the peak requested stays the trace's own. Any other
// failure stops the replay with an error that names the line.
func replay(p *pool.Pool, open openEvents, m *meter, repeat int, timeline io.Writer) (result, error) {
	res := result{tally: newTally(), DriverNsModelled: m.model != nil}
	var elapsed time.Duration
	m.take() // what making the pool cost is not the trace's
	chunk := make([]event, 0, chunkEvents)
	ops := make([]op, 0, chunkEvents)
	r := &runner{p: p}
	for pass := range repeat {
		pl := newPlanner(m.streams)
		wall, err := replayPass(r, pl, open, m, chunk, ops, timeline)
		if pass == 0 {
			res.Events = pl.events
			res.PeakRequestedBytes = pl.peak
		}
		timeline = nil // the first pass only
		elapsed += wall
		t, inSource := m.take() // the source is called only in the timed parts
		if m.model != nil {
			wall += time.Duration(t.Ns) - inSource
		}
		// What freeing the leftovers calls is counted, not timed.
		err = errors.Join(err, r.freeLive())
		untimed, _ := m.take()
		t.merge(untimed)
		res.merge(t)
		res.Repetitions = append(res.Repetitions, repetition{t, wall.Nanoseconds()})
		res.WallNs += wall.Nanoseconds()
		res.Allocs, res.Frees = r.allocs, r.frees
		if err != nil {
			return res, err
		}
	}
	res.fromStats(p)
	if ops := res.Allocs + res.Frees; ops > 0 {
		res.NsPerOp = float64(elapsed.Nanoseconds()) / float64(ops)
	}
	return res, nil
}

// replayPass runs one pass of a trace: each chunk read and planned
// outside the timed region, then run. It returns the time the runs took.
func replayPass(r *runner, pl *planner, open openEvents, m *meter, chunk []event, ops []op, timeline io.Writer) (time.Duration, error) {
	evs, closeEvents, err := open()
	if err != nil {
		return 0, err
	}
	if timeline != nil {
		if _, err := fmt.Fprintln(timeline, "line,requested_bytes,reserved_bytes"); err != nil {
			return 0, errors.Join(err, closeEvents())
		}
	}
	r.timeline = timeline
	var wall time.Duration
	for err == nil {
		chunk, err = readChunk(evs, chunk[:0])
		if serr := m.streams.prepare(chunk); serr != nil {
			err = serr
			break
		}
		var perr error
		ops, perr = pl.plan(chunk, ops[:0])
		r.fit(pl.slots)
		// Reading the chunk allocated; collect it now, so that no
		// collection runs, nor its write barriers, while the pool is
		// timed.
		runtime.GC()
		start := clock()
		rerr := r.run(ops)
		wall += clock().Sub(start)
		if rerr != nil || perr != nil {
			err = errors.Join(rerr, perr)
		}
		if err == io.EOF {
			err = nil
			break
		}
	}
	return wall, errors.Join(err, closeEvents())
}

// fromStats takes the pool's figures after the replay.
func (res *result) fromStats(p *pool.Pool) {
	st := p.Stats()
	res.Expandable = p.Expandable()
	res.PeakAllocatedBytes = st.PeakAllocated
	res.PeakReservedBytes = st.PeakReserved
	if res.PeakRequestedBytes > 0 {
		res.ReservedRatio = float64(st.PeakReserved) / float64(res.PeakRequestedBytes)
	}
	res.SourceAllocs = st.SourceAllocs
	res.SourceFrees = st.SourceFrees
	res.PagesMoved = st.PagesMoved
	res.CacheHits = st.CacheHits
	res.OOMs = st.OOMs
	res.Retries = st.Retries
	res.Growths = st.Growths
}

// readChunk appends to buf up to its capacity of events; io.EOF says the
// trace ended (buf may hold its last events).
func readChunk(evs events, buf []event) ([]event, error) {
	for len(buf) < cap(buf) {
		ev, err := evs.Next()
		if err != nil {
			return buf, err
		}
		buf = append(buf, ev)
	}
	return buf, nil
}

// runner makes a trace's planned pool calls: what the replay times. It
// holds each live allocation's block in its slot.
type runner struct {
	p        *pool.Pool
	timeline io.Writer // nil: none
	held     []heldBlock
	allocs   int // pool allocations made, over every pass
	frees    int // pool frees made
}

// heldBlock is a slot: the block of a live allocation, if it succeeded.
type heldBlock struct {
	b  pool.Block
	ok bool
}

// fit makes room for n slots, outside the timed region.
func (r *runner) fit(n int32) {
	if int(n) > len(r.held) {
		r.held = append(r.held, make([]heldBlock, int(n)-len(r.held))...)
	}
}

// run makes ops' pool calls. With a timeline it writes, after every
// event, the event's line and the bytes requested and reserved then, as
// CSV.
func (r *runner) run(ops []op) error {
	for i := range ops {
		o := &ops[i]
		switch o.kind {
		case opAlloc:
			b, err := r.p.AllocOn(o.size, o.stream)
			r.allocs++
			if err != nil && !errors.Is(err, pool.ErrOutOfMemory) {
				return fmt.Errorf("trace line %d: alloc of %d bytes: %w", o.line, o.size, err)
			}
			r.held[o.slot] = heldBlock{b, err == nil}
		case opFree:
			h := &r.held[o.slot]
			if !h.ok {
				break // its allocation ran out of memory
			}
			err := r.p.Free(h.b)
			r.frees++
			if err != nil {
				return fmt.Errorf("trace line %d: free: %w", o.line, err)
			}
			*h = heldBlock{}
		}
		if r.timeline != nil {
			if _, err := fmt.Fprintf(r.timeline, "%d,%d,%d\n", o.line, o.requested, r.p.Stats().Reserved); err != nil {
				return err
			}
		}
	}
	return nil
}

// freeLive frees what the trace left live, so that the next pass, or
// Close, finds a clean pool; it frees them too when the trace turns out
// malformed halfway.
func (r *runner) freeLive() error {
	var err error
	for i := range r.held {
		h := &r.held[i]
		if !h.ok {
			continue
		}
		if ferr := r.p.Free(h.b); ferr != nil {
			err = errors.Join(err, fmt.Errorf("freeing what the trace left live: %w", ferr))
			continue
		}
		*h = heldBlock{}
	}
	return err
}
