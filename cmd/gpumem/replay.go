package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

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
	// WallNs is the time from the first pool call to the last, trace parsing
	// excluded. With --driver sim it is modelled: the measured time, less
	// the time spent in the simulated source, plus the modelled driver time.
	WallNs      int64        `json:"wall_ns"`
	Repetitions []repetition `json:"repetitions"`
}

// repetition is one pass over the trace.
type repetition struct {
	tally
	WallNs int64 `json:"wall_ns"`
}

// events yields a trace's events one at a time; io.EOF ends them.
type events interface{ next() (event, error) }

// openEvents opens a trace's events from the start, for one pass.
type openEvents func() (events, func() error, error)

// sliceEvents serves events from memory: tests and fuzzing.
type sliceEvents struct {
	evs []event
	i   int
}

func (s *sliceEvents) next() (event, error) {
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
// repeat times; between repetitions it frees what the trace left live.
// Frees of addresses the trace never allocated (made before recording
// began) are skipped; an allocation that fails with ErrOutOfMemory is
// counted and its free skipped, and the peak requested stays the trace's
// own. Any other failure stops the replay with an error that names the
// line.
func replay(p *pool.Pool, open openEvents, m *meter, repeat int, timeline io.Writer) (result, error) {
	res := result{tally: newTally(), DriverNsModelled: m.model != nil}
	var elapsed time.Duration
	m.take() // what making the pool cost is not the trace's
	chunk := make([]event, 0, chunkEvents)
	for pass := range repeat {
		evs, closeEvents, err := open()
		if err != nil {
			return res, err
		}
		if timeline != nil {
			if _, err := fmt.Fprintln(timeline, "line,requested_bytes,reserved_bytes"); err != nil {
				return res, errors.Join(err, closeEvents())
			}
		}
		r := newReplayer(p, &res, timeline, pass == 0)
		r.streams = m.streams
		var wall time.Duration
		for err == nil {
			chunk, err = readChunk(evs, chunk[:0])
			if serr := m.streams.prepare(chunk); serr != nil {
				err = serr
				break
			}
			// Reading the chunk allocated; collect it now, so that no
			// collection runs, nor its write barriers, while the pool is
			// timed.
			runtime.GC()
			start := clock()
			if rerr := r.run(chunk); rerr != nil {
				err = rerr
			}
			wall += clock().Sub(start)
			if err == io.EOF {
				err = nil
				break
			}
		}
		start := clock()
		err = errors.Join(err, r.freeLive())
		wall += clock().Sub(start)
		err = errors.Join(err, closeEvents())
		timeline = nil // the first pass only
		elapsed += wall
		t, inSource := m.take() // the source is called only in the timed parts
		if m.model != nil {
			wall += time.Duration(t.Ns) - inSource
		}
		res.Repetitions = append(res.Repetitions, repetition{t, wall.Nanoseconds()})
		res.WallNs += wall.Nanoseconds()
		res.Ns += t.Ns
		for k, v := range t.Calls {
			res.Calls[k] += v
		}
		for k, v := range t.ByNs {
			res.ByNs[k] += v
		}
		if err != nil {
			return res, err
		}
	}
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
	if ops := res.Allocs + res.Frees; ops > 0 {
		res.NsPerOp = float64(elapsed.Nanoseconds()) / float64(ops)
	}
	return res, nil
}

// readChunk appends to buf up to its capacity of events; io.EOF says the
// trace ended (buf may hold its last events).
func readChunk(evs events, buf []event) ([]event, error) {
	for len(buf) < cap(buf) {
		ev, err := evs.next()
		if err != nil {
			return buf, err
		}
		buf = append(buf, ev)
	}
	return buf, nil
}

// replayer runs one pass of a trace through a pool, chunk by chunk. Its
// memory is bounded by what the trace holds live: the blocks live, the
// allocations that ran out of memory and not yet freed, and the most
// recent frees, kept to tell a double free (see freedKept).
type replayer struct {
	p        *pool.Pool
	res      *result
	timeline io.Writer    // nil: none
	count    bool         // the first pass counts the trace's events
	streams  *streamTable // the source's stream for each of the trace's; nil: the same numbers

	requested int64 // bytes the trace holds live, counted from the trace itself
	live      map[uint64]liveBlock
	failed    map[uint64]int64 // allocations that ran out of memory -> their size
	freed     map[uint64]int   // address -> line of its last free, the most recent only
	freedFIFO []freedAt        // the frees remembered, oldest first
}

type freedAt struct {
	addr uint64
	line int
}

type liveBlock struct {
	b    pool.Block
	line int
}

// freedKept is how many freed addresses a replay remembers, beyond the
// number live, to name both lines of a double free: a trace that frees an
// address twice with more frees than this between is read as freeing an
// allocation made before recording began, and skipped.
const freedKept = 1 << 12

func newReplayer(p *pool.Pool, res *result, timeline io.Writer, count bool) *replayer {
	return &replayer{p: p, res: res, timeline: timeline, count: count, live: map[uint64]liveBlock{},
		failed: map[uint64]int64{}, freed: map[uint64]int{}}
}

// run replays evs. With a timeline it writes, after every event, the
// event's line and the bytes requested and reserved then, as CSV.
func (r *replayer) run(evs []event) error {
	for _, ev := range evs {
		if ev.action != "alloc" && ev.action != "free_requested" {
			continue
		}
		if r.count {
			r.res.Events++
		}
		if err := r.event(ev); err != nil {
			return err
		}
		if r.timeline != nil {
			if _, err := fmt.Fprintf(r.timeline, "%d,%d,%d\n", ev.line, r.requested, r.p.Stats().Reserved); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *replayer) event(ev event) error {
	switch ev.action {
	case "alloc":
		if prev, ok := r.live[ev.addr]; ok {
			return fmt.Errorf("trace line %d: alloc at %d, which line %d allocated and nothing freed", ev.line, ev.addr, prev.line)
		}
		if _, ok := r.failed[ev.addr]; ok {
			return fmt.Errorf("trace line %d: alloc at %d, which an earlier allocation took and nothing freed", ev.line, ev.addr)
		}
		r.forget(ev.addr)
		r.requested += ev.size
		r.res.PeakRequestedBytes = max(r.res.PeakRequestedBytes, r.requested)
		stream := uintptr(ev.stream)
		if r.streams != nil {
			stream = r.streams.of(ev.stream)
		}
		b, err := r.p.AllocOn(ev.size, stream)
		r.res.Allocs++
		if errors.Is(err, pool.ErrOutOfMemory) {
			r.failed[ev.addr] = ev.size
			return nil
		}
		if err != nil {
			r.requested -= ev.size
			return fmt.Errorf("trace line %d: alloc of %d bytes: %w", ev.line, ev.size, err)
		}
		r.live[ev.addr] = liveBlock{b, ev.line}
	case "free_requested":
		lb, ok := r.live[ev.addr]
		if !ok {
			if size, ok := r.failed[ev.addr]; ok {
				delete(r.failed, ev.addr)
				r.requested -= size
				return nil
			}
			if line, seen := r.freed[ev.addr]; seen {
				return fmt.Errorf("trace line %d: double free of %d, freed at line %d", ev.line, ev.addr, line)
			}
			return nil // allocated before recording began
		}
		err := r.p.Free(lb.b)
		r.res.Frees++
		if err != nil {
			return fmt.Errorf("trace line %d: free of %d: %w", ev.line, ev.addr, err)
		}
		delete(r.live, ev.addr)
		r.requested -= lb.b.Size()
		r.remember(ev.addr, ev.line)
	}
	return nil
}

// remember notes that addr was freed at line, forgetting the oldest frees
// past freedKept plus the number of allocations live.
func (r *replayer) remember(addr uint64, line int) {
	r.freed[addr] = line
	r.freedFIFO = append(r.freedFIFO, freedAt{addr, line})
	for len(r.freedFIFO) > freedKept+len(r.live)+len(r.failed) {
		old := r.freedFIFO[0]
		r.freedFIFO = r.freedFIFO[1:]
		if r.freed[old.addr] == old.line {
			delete(r.freed, old.addr)
		}
	}
}

// forget drops what is remembered of addr's last free: it is allocated again.
func (r *replayer) forget(addr uint64) { delete(r.freed, addr) }

// freeLive frees what the trace left live, so that the next pass, or
// Close, finds a clean pool; it frees them too when the trace turns out
// malformed halfway.
func (r *replayer) freeLive() error {
	var err error
	for addr, lb := range r.live {
		if ferr := r.p.Free(lb.b); ferr != nil {
			err = errors.Join(err, fmt.Errorf("freeing what the trace left live: %w", ferr))
			continue
		}
		r.requested -= lb.b.Size()
		delete(r.live, addr)
	}
	return err
}
