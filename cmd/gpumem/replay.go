package main

import (
	"errors"
	"fmt"
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
	NsPerOp            float64 `json:"ns_per_op"`
}

// replay runs the alloc and free_requested events of a trace through p.
// Frees of addresses the trace never allocated (made before recording
// began) are skipped; an allocation that fails with ErrOutOfMemory is
// counted and its free skipped. Any other failure stops the replay with an
// error that names the line.
func replay(p *pool.Pool, events []event) (result, error) {
	var res result
	res.Events = len(events)
	type liveBlock struct {
		b    pool.Block
		line int
	}
	live := make(map[uint64]liveBlock)
	failed := make(map[uint64]bool) // allocations that ran out of memory
	freed := make(map[uint64]int)   // address -> line of its last free
	var elapsed time.Duration
	var requested int64 // bytes the trace holds live, counted from the trace itself
	for _, ev := range events {
		switch ev.action {
		case "alloc":
			if prev, ok := live[ev.addr]; ok {
				return res, fmt.Errorf("trace line %d: alloc at %d, which line %d allocated and nothing freed", ev.line, ev.addr, prev.line)
			}
			start := time.Now()
			b, err := p.AllocOn(ev.size, uintptr(ev.stream))
			elapsed += time.Since(start)
			res.Allocs++
			if errors.Is(err, pool.ErrOutOfMemory) {
				failed[ev.addr] = true
				continue
			}
			if err != nil {
				return res, fmt.Errorf("trace line %d: alloc of %d bytes: %w", ev.line, ev.size, err)
			}
			delete(failed, ev.addr)
			delete(freed, ev.addr)
			live[ev.addr] = liveBlock{b, ev.line}
			requested += ev.size
			res.PeakRequestedBytes = max(res.PeakRequestedBytes, requested)
		case "free_requested":
			lb, ok := live[ev.addr]
			if !ok {
				if failed[ev.addr] {
					delete(failed, ev.addr)
					continue
				}
				if line, seen := freed[ev.addr]; seen {
					return res, fmt.Errorf("trace line %d: double free of %d, freed at line %d", ev.line, ev.addr, line)
				}
				continue // allocated before recording began
			}
			start := time.Now()
			err := p.Free(lb.b)
			elapsed += time.Since(start)
			res.Frees++
			if err != nil {
				return res, fmt.Errorf("trace line %d: free of %d: %w", ev.line, ev.addr, err)
			}
			delete(live, ev.addr)
			freed[ev.addr] = ev.line
			requested -= lb.b.Size()
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
	if ops := res.Allocs + res.Frees; ops > 0 {
		res.NsPerOp = float64(elapsed.Nanoseconds()) / float64(ops)
	}
	// The pool keeps its cache; what the trace left live is freed here so
	// that Close can report a clean pool.
	for _, lb := range live {
		if err := p.Free(lb.b); err != nil {
			return res, fmt.Errorf("freeing what the trace left live: %w", err)
		}
	}
	return res, nil
}
