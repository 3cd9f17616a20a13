package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
)

const replayUsage = `usage: gpumem replay [flags] FILE
       gpumem replay [flags] -        (the trace on standard input)

replay replays an allocation trace (CSV: action,addr,size,stream[,scope],
plain or gzip; docs/trace-format.md) through gpuscope's pool and prints one JSON
object: peak requested and reserved bytes, their ratio, every driver call
by kind and its time (measured with --driver cuda, modelled from an H200's
costs with --driver sim), and the time of each pass. Sizes in flags are
bytes, or a number with a unit: 4096, 512MiB, 80GB.

Exit status: 0; 1 for an error (a bad flag, an unreadable, malformed or
empty trace); 3 when allocations of the trace ran out of memory: the JSON
is printed as usual (ooms counts the failures) and stderr says so.
`

// replayOptions are the flags of replay.
type replayOptions struct {
	driver, expand, timeline                  string
	capacity, pageSize, maxReserved, maxSplit int64
	threshold, step                           int64
	repeat, shards                            int
}

// maxRepeat is the most passes a replay makes.
const maxRepeat = 10_000

// defaultCapacity is the simulated device's memory: more than any GPU has.
const defaultCapacity = 1 << 40

func (o *replayOptions) declare(fs *flag.FlagSet) {
	driverVar(fs, &o.driver, "sim", "sim", "cuda")
	bytesVar(fs, &o.capacity, "capacity", defaultCapacity, byteFlag{min: 1, max: maxBytes, note: "there is no unlimited: the default, 1TiB, is more than any GPU has"},
		"with --driver sim: the simulated device's memory, a `size`; allocations beyond it run out of memory (to cap a GPU, use --max-reserved)")
	bytesVar(fs, &o.pageSize, "page-size", sim.DefaultPageSize, byteFlag{min: 64 << 10, max: 1 << 30, pow2: true},
		"with --driver sim: the `size` of a mapped page (a GPU's granularity: 2MiB on an H200)")
	choiceVar(fs, &o.expand, "expand", "auto", []string{"auto", "never", "always"}, "`when` to map pages: where the source can (auto), never, or always")
	bytesVar(fs, &o.maxReserved, "max-reserved", 0, byteFlag{max: maxBytes, zero: "no cap"}, "the most the pool reserves, a `size`, with either driver (0: no cap; else at least one page, the least the pool maps)")
	bytesVar(fs, &o.maxSplit, "max-split", 0, byteFlag{max: maxBytes, zero: "unlimited"}, "blocks of this `size` or more are not split for smaller requests; with --expand never (0: unlimited; else more than 20MiB)")
	bytesVar(fs, &o.threshold, "release-threshold", -1, byteFlag{max: maxBytes, minusOne: "keep everything"},
		"the pool gives cached memory back to the device down to this `size` when a stream synchronizes (-1: keep everything)")
	intVar(fs, &o.repeat, "repeat", 1, 1, maxRepeat, "replay the trace this many `times`, freeing what is still live between repetitions")
	fs.StringVar(&o.timeline, "timeline", "", "write the bytes requested and reserved after every event of the first pass to this CSV `file` (slows the replay: time it without)")
	bytesVar(fs, &o.step, "growth-step", pool.DefaultGrowthStep, byteFlag{max: maxBytes, zero: "by exactly what a request lacks"}, "large mapped arenas grow by multiples of this `size` (0: by exactly what a request lacks)")
	intVar(fs, &o.shards, "shards", 1, 0, 1024, "the pool's front-cache `shards`; with one a replay is deterministic (0: the pool's default, 2 x GOMAXPROCS)")
}

// check refuses flags that mean nothing together.
func (o *replayOptions) check(c *call) error {
	for _, name := range []string{"capacity", "page-size"} {
		if c.given[name] && o.driver != "sim" {
			return usageErrorf("replay", "--%s is the simulated device's, for --driver sim; to cap a GPU, use --max-reserved", name)
		}
	}
	if err := checkDriver(o.driver); err != nil {
		return err
	}
	if o.maxSplit != 0 && o.maxSplit <= 20<<20 {
		return usageErrorf("replay", "--max-split %s: want 0 (unlimited) or more than 20MiB", units.ExactBytes(o.maxSplit))
	}
	if len(c.args) != 1 {
		return usageErrorf("replay", "replay needs one trace FILE (or - for standard input), %s", gotArgs(c))
	}
	if o.timeline != "" {
		return overwrites("replay", "--timeline", o.timeline, c.args[0])
	}
	return nil
}

// poolOptions returns the pool's options the flags ask for.
func (o *replayOptions) poolOptions() []pool.Option {
	var opts []pool.Option
	switch o.expand {
	case "never":
		opts = append(opts, pool.Expand(pool.ExpandNever))
	case "always":
		opts = append(opts, pool.Expand(pool.ExpandAlways))
	}
	if o.maxReserved != 0 {
		opts = append(opts, pool.MaxReserved(o.maxReserved))
	}
	if o.maxSplit != 0 {
		opts = append(opts, pool.MaxSplitSize(o.maxSplit))
	}
	if o.shards != 0 {
		opts = append(opts, pool.Shards(o.shards))
	}
	if o.step != pool.DefaultGrowthStep {
		opts = append(opts, pool.GrowthStep(o.step))
	}
	if o.threshold >= 0 {
		opts = append(opts, pool.ReleaseThreshold(o.threshold))
	}
	return opts
}

// run replays the trace its one positional argument names and reports
// the result on stdout.
func (o *replayOptions) run(c *call) error {
	if err := o.check(c); err != nil {
		return err
	}
	src, closeSrc, err := o.openSource()
	if err != nil {
		return err
	}
	defer closeSrc()
	file := c.args[0]
	in, err := openInput(c.ctx, file, c.stdin, o.repeat, c.stderr)
	if err != nil {
		return err
	}
	res, err := o.replay(src, in)
	if err = errors.Join(err, in.close()); err != nil {
		return fmt.Errorf("%s: %w", inputName(file), err)
	}
	res.Trace = file
	res.Driver = o.driver
	return report(c.stdout, res, o.deviceNote())
}

// classicSegment is the least the pool reserves at once where it maps no
// pages: a segment of small blocks, 2 MiB as PyTorch's (pool/arena.go).
const classicSegment = 2 << 20

// leastCap is the smallest --max-reserved under which an allocation can
// fit on src: one page, the least the pool reserves at once (the source's
// granularity where the pool maps pages, a classic segment where not).
func (o *replayOptions) leastCap(src pool.Source) int64 {
	if m, ok := src.(pool.PageMapper); ok && o.expand != "never" {
		return max(m.Granularity(), pool.Alignment)
	}
	return classicSegment
}

// openSource opens the source the flags ask for, and refuses a cap, or a
// simulated device, too small for it.
func (o *replayOptions) openSource() (pool.Source, func(), error) {
	src, closeSrc, err := openSource(o.driver, o.capacity, o.pageSize)
	if err != nil {
		return nil, nil, err
	}
	least := o.leastCap(src)
	switch {
	case o.maxReserved != 0 && o.maxReserved < least:
		closeSrc()
		return nil, nil, usageErrorf("replay", "--max-reserved %s: a cap below one page holds nothing, so every allocation would fail; want 0 (no cap) or at least %s, the least the pool reserves at once here",
			units.ExactBytes(o.maxReserved), units.ExactBytes(least))
	case o.driver == "sim" && o.capacity < least:
		closeSrc()
		return nil, nil, usageErrorf("replay", "--capacity %s: a simulated device smaller than one page holds nothing, so every allocation would fail; want at least %s, the least the pool reserves at once here",
			units.ExactBytes(o.capacity), units.ExactBytes(least))
	}
	return src, closeSrc, nil
}

// replay makes the pool on src and replays in on it.
func (o *replayOptions) replay(src pool.Source, in *input) (res result, err error) {
	var model sim.CostTable
	if o.driver == "sim" {
		model = sim.H200
	}
	src, m, err := newMeter(src, model)
	if err != nil {
		return res, err
	}
	p, err := pool.New(src, o.poolOptions()...)
	if err != nil {
		return res, err
	}
	var tl io.Writer
	if o.timeline != "" {
		f, err := os.Create(o.timeline)
		if err != nil {
			return res, errors.Join(err, p.Close())
		}
		bw := bufio.NewWriter(f)
		defer func() { err = errors.Join(err, bw.Flush(), f.Close()) }()
		tl = bw
	}
	res, err = replay(p, in.open, m, o.repeat, tl)
	return res, errors.Join(err, m.streams.close(p), p.Close())
}

// deviceNote says, for an out-of-memory notice, what memory the device
// had: the simulated device's capacity and the flag that sets it; "" for
// a GPU, whose memory its driver reports; and the pool's cap, where one
// was given.
func (o *replayOptions) deviceNote() string {
	var note string
	if o.driver == "sim" {
		note = fmt.Sprintf("; the simulated device has %s (--capacity)", units.WithBytes(o.capacity))
	}
	if o.maxReserved != 0 {
		note += fmt.Sprintf("; the pool's cap is %s (--max-reserved)", units.WithBytes(o.maxReserved))
	}
	return note
}

// report writes a replay's result as JSON; allocations that ran out of
// memory make it an error of exit status exitOutOfMemory, whose message
// ends with note.
func report(stdout io.Writer, res result, note string) error {
	res.PeakRequested = units.FormatBytes(res.PeakRequestedBytes)
	res.PeakAllocated = units.FormatBytes(res.PeakAllocatedBytes)
	res.PeakReserved = units.FormatBytes(res.PeakReservedBytes)
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return err
	}
	if res.OOMs > 0 {
		return &exitStatus{exitOutOfMemory, fmt.Errorf("%s: %d of %d allocations ran out of memory (the pool reserved at most %s); peak_requested_bytes, %s, is the trace's own%s",
			res.Trace, res.OOMs, res.Allocs, units.WithBytes(res.PeakReservedBytes), units.WithBytes(res.PeakRequestedBytes), note)}
	}
	return nil
}

// result is what a replay prints, as one JSON object.
type result struct {
	Trace              string `json:"trace"`
	Driver             string `json:"driver"`
	Expandable         bool   `json:"expandable"`
	Events             int    `json:"alloc_and_free_events"`
	Allocs             int    `json:"allocs"`
	Frees              int    `json:"frees"`
	PeakRequestedBytes int64  `json:"peak_requested_bytes"`
	PeakAllocatedBytes int64  `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64  `json:"peak_reserved_bytes"`
	// The three peaks for people to read, in the largest unit.
	PeakRequested string  `json:"peak_requested"`
	PeakAllocated string  `json:"peak_allocated"`
	PeakReserved  string  `json:"peak_reserved"`
	ReservedRatio float64 `json:"reserved_ratio"`
	SourceAllocs  int64   `json:"source_allocs"`
	SourceFrees   int64   `json:"source_frees"`
	PagesMoved    int64   `json:"pages_moved"`
	CacheHits     int64   `json:"cache_hits"`
	OOMs          int64   `json:"ooms"`
	Retries       int64   `json:"retries"`
	Growths       int64   `json:"growths"`
	NsPerOp       float64 `json:"ns_per_op"`
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
			if err == nil && pl.allocs == 0 {
				err = errEmptyTrace
			}
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
			b, err := r.p.AllocContext(context.Background(), o.size, o.stream)
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
