package main

import (
	"fmt"

	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
)

// A replay splits each chunk of a trace in two steps: a planner, outside
// the timed region, checks the trace and turns its events into the pool
// calls to make (an op each); a runner, timed, makes them. What the pool
// does not decide is decided before the clock starts: which allocation a
// free names, the bytes the trace holds live, the stream on the source,
// whether the trace frees twice. The timed loop is then the pool's calls
// and a slice index, as a C++ replay's is the allocator's calls and a
// hash-table lookup.

// opKind says what an op does.
type opKind uint8

const (
	opAlloc opKind = iota // allocate into the op's slot
	opFree                // free what the op's slot holds, if its allocation succeeded
	opSkip                // a free of memory allocated before recording began: nothing
)

// op is one event of a trace, planned.
type op struct {
	kind      opKind
	slot      int32   // the allocation's place in the runner's table
	size      int64   // bytes to allocate
	stream    uintptr // the source's stream
	line      int     // the trace's line, for errors and the timeline
	requested int64   // bytes the trace holds live after this event, for the timeline
}

// planner turns one pass's events into ops. Its memory is bounded by what
// the trace holds live, plus the most recent frees, kept to tell a double
// free (see freedKept).
type planner struct {
	streams *streamTable // the source's stream for each of the trace's; nil: the same numbers

	events int   // alloc and free events planned
	allocs int   // alloc events planned
	peak   int64 // the most bytes the trace held live
	bounds *traceBounds

	live      map[uint64]liveSlot // address -> its allocation, while live
	slots     int32               // slots handed out so far: the runner's table needs this many
	spare     []int32             // slots free for reuse
	freed     map[uint64]int      // address -> line of its last free, the most recent only
	freedFIFO []freedAt           // the frees remembered, oldest first
}

type liveSlot struct {
	slot int32
	size int64
	line int
}

type freedAt struct {
	addr uint64
	line int
}

// freedKept is how many freed addresses a replay remembers, beyond the
// number live, to name both lines of a double free: a trace that frees an
// address twice with more frees than this between is read as freeing an
// allocation made before recording began, and skipped.
const freedKept = 1 << 12

func newPlanner(streams *streamTable) *planner {
	return &planner{streams: streams, bounds: newTraceBounds(), live: map[uint64]liveSlot{}, freed: map[uint64]int{}}
}

// plan appends to ops the ops of evs' alloc and free events. Where the
// trace is wrong it returns the ops before the wrong event and an error
// that names its line.
func (pl *planner) plan(evs []event, ops []op) ([]op, error) {
	for _, ev := range evs {
		var o op
		var err error
		switch ev.Action {
		case trace.Alloc:
			o, err = pl.alloc(ev)
		case trace.Free:
			o, err = pl.free(ev)
		default:
			continue
		}
		if err != nil {
			return ops, err
		}
		pl.events++
		o.line, o.requested = ev.Line, pl.bounds.bytes
		ops = append(ops, o)
	}
	return ops, nil
}

func (pl *planner) alloc(ev event) (op, error) {
	if prev, ok := pl.live[ev.Addr]; ok {
		return op{}, fmt.Errorf("trace line %d: alloc at %d, which line %d allocated and nothing freed", ev.Line, ev.Addr, prev.line)
	}
	if err := pl.bounds.alloc(ev); err != nil {
		return op{}, err
	}
	delete(pl.freed, ev.Addr) // allocated again: a free of it is no double free
	pl.allocs++
	slot := pl.slots
	if n := len(pl.spare); n > 0 {
		slot, pl.spare = pl.spare[n-1], pl.spare[:n-1]
	} else {
		pl.slots++
	}
	pl.live[ev.Addr] = liveSlot{slot, ev.Size, ev.Line}
	pl.peak = max(pl.peak, pl.bounds.bytes)
	stream := uintptr(ev.Stream)
	if pl.streams != nil {
		stream = pl.streams.of(ev.Stream)
	}
	return op{kind: opAlloc, slot: slot, size: ev.Size, stream: stream}, nil
}

func (pl *planner) free(ev event) (op, error) {
	ls, ok := pl.live[ev.Addr]
	if !ok {
		if line, seen := pl.freed[ev.Addr]; seen {
			return op{}, fmt.Errorf("trace line %d: double free of %d, freed at line %d", ev.Line, ev.Addr, line)
		}
		return op{kind: opSkip}, nil // allocated before recording began
	}
	delete(pl.live, ev.Addr)
	pl.spare = append(pl.spare, ls.slot)
	pl.bounds.free(ls.size)
	pl.remember(ev.Addr, ev.Line)
	return op{kind: opFree, slot: ls.slot}, nil
}

// remember notes that addr was freed at line, forgetting the oldest frees
// past freedKept plus the number of allocations live.
func (pl *planner) remember(addr uint64, line int) {
	pl.freed[addr] = line
	pl.freedFIFO = append(pl.freedFIFO, freedAt{addr, line})
	for len(pl.freedFIFO) > freedKept+len(pl.live) {
		old := pl.freedFIFO[0]
		pl.freedFIFO = pl.freedFIFO[1:]
		if pl.freed[old.addr] == old.line {
			delete(pl.freed, old.addr)
		}
	}
}

// The most a trace may hold at once: more than any device's program does,
// and what keeps a replay's and a plot's memory bounded whatever the
// trace. Each live allocation costs a replay about a hundred bytes, each
// stream an arena of the pool's.
const (
	maxLiveAllocs = 1 << 22
	maxLiveBytes  = pool.MaxSize
	maxStreams    = 1 << 10
)

// traceBounds counts what a pass over a trace holds live and refuses a
// trace that holds more than the bounds above.
type traceBounds struct {
	maxLive int // maxLiveAllocs; tests lower it
	live    int
	bytes   int64
	streams map[uint64]bool // the streams seen, at most maxStreams
}

func newTraceBounds() *traceBounds {
	return &traceBounds{maxLive: maxLiveAllocs, streams: map[uint64]bool{}}
}

// alloc counts ev, an allocation, or says which bound it passes.
func (b *traceBounds) alloc(ev event) error {
	switch {
	case b.live >= b.maxLive:
		return fmt.Errorf("trace line %d: more than %d allocations live at once, the most gpumem replays", ev.Line, b.maxLive)
	case ev.Size > maxLiveBytes-b.bytes:
		return fmt.Errorf("trace line %d: more than %s live at once, more than any device holds", ev.Line, units.FormatBytes(maxLiveBytes))
	case !b.streams[ev.Stream] && len(b.streams) >= maxStreams:
		return fmt.Errorf("trace line %d: stream %d, past %d streams, the most gpumem replays", ev.Line, ev.Stream, maxStreams)
	}
	b.live++
	b.bytes += ev.Size
	b.streams[ev.Stream] = true
	return nil
}

// free counts the free of a live allocation of size bytes.
func (b *traceBounds) free(size int64) {
	b.live--
	b.bytes -= size
}
