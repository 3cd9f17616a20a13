package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpuscope/gpuscope/pool"
)

// result is what a replay prints, as one JSON object.
type result struct {
	Trace              string  `json:"trace"`
	Driver             string  `json:"driver"`
	Expandable         bool    `json:"expandable"`
	Events             int     `json:"events"`
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

// replay runs the alloc and free_requested events of a trace through p,
// repeat times; between repetitions it frees what the trace left live.
// Frees of addresses the trace never allocated (made before recording
// began) are skipped; an allocation that fails with ErrOutOfMemory is
// counted and its free skipped. Any other failure stops the replay with an
// error that names the line.
func replay(p *pool.Pool, open openEvents, m *meter, repeat int, timeline io.Writer) (result, error) {
	res := result{tally: newTally(), DriverNsModelled: m.model != nil}
	var requested int64 // bytes the trace holds live, counted from the trace itself
	var elapsed time.Duration
	m.take() // what making the pool cost is not the trace's
	for range repeat {
		evs, closeEvents, err := open()
		if err != nil {
			return res, err
		}
		start := time.Now()
		err = replayOnce(p, evs, &res, &requested, timeline)
		err = errors.Join(err, closeEvents())
		timeline = nil // the first pass only
		wall := time.Since(start)
		elapsed += wall
		t, inSource := m.take()
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

// replayOnce runs one pass of the trace, then frees what it left live so
// that the next pass, or Close, finds a clean pool; it frees them too when
// the trace turns out malformed halfway.
//
// With a timeline it writes, after every event, the event's line and the
// bytes requested and reserved then, as CSV.
func replayOnce(p *pool.Pool, evs events, res *result, requested *int64, timeline io.Writer) (err error) {
	if timeline != nil {
		if _, err := fmt.Fprintln(timeline, "line,requested_bytes,reserved_bytes"); err != nil {
			return err
		}
	}
	type liveBlock struct {
		b    pool.Block
		line int
	}
	live := make(map[uint64]liveBlock)
	defer func() {
		for _, lb := range live {
			if ferr := p.Free(lb.b); ferr != nil {
				err = errors.Join(err, fmt.Errorf("freeing what the trace left live: %w", ferr))
				continue
			}
			*requested -= lb.b.Size()
		}
	}()
	failed := make(map[uint64]bool) // allocations that ran out of memory
	freed := make(map[uint64]int)   // address -> line of its last free
	for {
		ev, err := evs.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		res.Events++
		switch ev.action {
		case "alloc":
			if prev, ok := live[ev.addr]; ok {
				return fmt.Errorf("trace line %d: alloc at %d, which line %d allocated and nothing freed", ev.line, ev.addr, prev.line)
			}
			b, err := p.AllocOn(ev.size, uintptr(ev.stream))
			res.Allocs++
			if errors.Is(err, pool.ErrOutOfMemory) {
				failed[ev.addr] = true
				continue
			}
			if err != nil {
				return fmt.Errorf("trace line %d: alloc of %d bytes: %w", ev.line, ev.size, err)
			}
			delete(failed, ev.addr)
			delete(freed, ev.addr)
			live[ev.addr] = liveBlock{b, ev.line}
			*requested += ev.size
			res.PeakRequestedBytes = max(res.PeakRequestedBytes, *requested)
		case "free_requested":
			lb, ok := live[ev.addr]
			if !ok {
				if failed[ev.addr] {
					delete(failed, ev.addr)
					continue
				}
				if line, seen := freed[ev.addr]; seen {
					return fmt.Errorf("trace line %d: double free of %d, freed at line %d", ev.line, ev.addr, line)
				}
				continue // allocated before recording began
			}
			err := p.Free(lb.b)
			res.Frees++
			if err != nil {
				return fmt.Errorf("trace line %d: free of %d: %w", ev.line, ev.addr, err)
			}
			delete(live, ev.addr)
			freed[ev.addr] = ev.line
			*requested -= lb.b.Size()
		default:
			continue
		}
		if timeline != nil {
			if _, err := fmt.Fprintf(timeline, "%d,%d,%d\n", ev.line, *requested, p.Stats().Reserved); err != nil {
				return err
			}
		}
	}
	return nil
}
