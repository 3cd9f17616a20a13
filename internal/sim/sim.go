// Package sim is a simulated memory source for package pool: it hands out
// address ranges and pages without touching memory, so a trace that used
// 20 GB of device memory replays on a laptop. It checks its callers as a
// driver would: a double free, an unknown pointer, a map over a mapped page
// or an access to an unmapped range is an error, and so is going beyond the
// capacity. TorchExpandable models PyTorch's allocator in its expandable
// mode, so that the two can be compared here too.
package sim

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuscope/gpuscope/internal/handles"
)

// ErrOutOfMemory is what the source returns beyond its capacity. Its error
// type has OutOfMemory() bool, which package pool recognizes.
var ErrOutOfMemory error = oomError{}

type oomError struct{}

func (oomError) Error() string     { return "sim: out of memory" }
func (oomError) OutOfMemory() bool { return true }

// DefaultPageSize is CUDA's allocation granularity on an H200.
const DefaultPageSize = 2 << 20

// Source is a simulated device. It implements pool.Source, pool.EventSource
// and pool.PageMapper; [Source.Plain] hides the page mapping. It is safe for
// concurrent use.
type Source struct {
	mu         sync.Mutex // protects the fields below
	capacity   int64      // 0: unlimited
	total      int64      // what MemInfo reports as total
	pageSize   int64
	used       int64 // bytes of live allocations and pages
	nextAddr   uintptr
	allocs     map[uintptr]int64     // live Alloc ranges
	maxAlloc   int64                 // the largest Alloc so far, which bounds Accessible's search
	reserves   map[uintptr]int64     // live address reservations
	handles    map[uint64]*simHandle // live handles: mapped or not
	nextHandle uint64
	granules   map[uintptr]granule // mapped granule address -> what is there
	mappings   map[uintptr]int64   // mapping start -> its size
	busy       map[uintptr]bool    // streams whose events stay incomplete
	broken     map[uintptr]bool    // streams on which no event can be recorded
	events     map[uintptr]*event
	nextEv     uintptr
	counts     Counts
	bill       bill
}

// bill adds up what a Source's calls would cost on a GPU: see PriceWith.
type bill struct {
	table CostTable // nil: no pricing
	total time.Duration
	owed  time.Duration // what the next create waits for releases before it
}

// charge counts one call of kind on size bytes and, where s is priced,
// adds its cost, with extra handles beyond the first for an access call.
// Called with s.mu held.
func (s *Source) charge(kind string, size int64, extra int) {
	if n := s.counts.of(kind); n != nil {
		*n++
	}
	if s.bill.table == nil {
		return
	}
	c, _ := s.bill.table.Cost(kind, size)
	per, _ := s.bill.table.Cost(PriceSetAccessExtraHandle, 0)
	s.bill.total += c + time.Duration(extra)*per
	switch kind {
	case CallCreate:
		s.bill.total += s.bill.owed
		s.bill.owed = 0
	case CallRelease:
		wait, _ := s.bill.table.Cost(PriceCreateAfterRelease, size)
		s.bill.owed += wait
	}
}

// PriceWith makes s add up, from now on, what each call it serves would
// cost by table t, priced as gpumem replay prices a replay on the simulated
// source: an access call by its first handle's size and the handles after
// it, a create with the waits of the releases before it.
func (s *Source) PriceWith(t CostTable) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bill = bill{table: t}
}

// Priced returns the modelled time of the calls served since PriceWith.
func (s *Source) Priced() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bill.total
}

type simHandle struct {
	size     int64
	mappings int // addresses it is mapped at
}

type granule struct {
	handle uint64
	access bool
}

type event struct {
	stream uintptr
	done   bool
}

// Counts are the calls a Source has served.
type Counts struct {
	Allocs, Frees                int64
	Creates, Releases            int64
	Maps, SetAccesses, Unmaps    int64
	Reserves, ReleasedReserves   int64
	EventsRecorded, EventsWaited int64
}

// countedCalls are the kinds of call Counts counts, in the order of
// Counts.of's fields.
var countedCalls = []string{CallAlloc, CallFree, CallCreate, CallRelease, CallMap, CallSetAccess,
	CallUnmap, CallReserveAddress, CallReleaseAddress, CallRecordEvent, CallWaitEvent}

// of returns the counter of calls of kind, nil for a kind not counted.
func (c *Counts) of(kind string) *int64 {
	fields := [...]*int64{&c.Allocs, &c.Frees, &c.Creates, &c.Releases, &c.Maps, &c.SetAccesses,
		&c.Unmaps, &c.Reserves, &c.ReleasedReserves, &c.EventsRecorded, &c.EventsWaited}
	if i := slices.Index(countedCalls, kind); i >= 0 {
		return fields[i]
	}
	return nil
}

// New returns a source with capacity bytes (0: unlimited) and a
// granularity of pageSize bytes (0: DefaultPageSize).
func New(capacity, pageSize int64) *Source {
	if pageSize == 0 {
		pageSize = DefaultPageSize
	}
	total := capacity
	if total == 0 {
		total = 1 << 40
	}
	return &Source{
		capacity: capacity, total: total, pageSize: pageSize, nextAddr: 1 << 32,
		allocs: map[uintptr]int64{}, reserves: map[uintptr]int64{}, handles: map[uint64]*simHandle{},
		granules: map[uintptr]granule{}, mappings: map[uintptr]int64{}, broken: map[uintptr]bool{}, busy: map[uintptr]bool{}, events: map[uintptr]*event{},
	}
}

// take claims n bytes of capacity. Called with s.mu held.
func (s *Source) take(n int64) error {
	if s.capacity > 0 && s.used+n > s.capacity {
		return fmt.Errorf("sim: %d bytes asked, %d of %d in use: %w", n, s.used, s.capacity, ErrOutOfMemory)
	}
	s.used += n
	held.bytes.Add(n)
	return nil
}

// place hands out fresh address space for n bytes, aligned to the page
// size, and books it in book.
func (s *Source) place(book map[uintptr]int64, n int64) uintptr {
	p := s.nextAddr
	s.nextAddr += uintptr((n + s.pageSize - 1) &^ (s.pageSize - 1))
	book[p] = n
	return p
}

// Alloc implements pool.Source.
func (s *Source) Alloc(size int64) (uintptr, error) {
	if size <= 0 {
		return 0, fmt.Errorf("sim: Alloc(%d)", size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.take(size); err != nil {
		return 0, err
	}
	s.maxAlloc = max(s.maxAlloc, size)
	s.charge(CallAlloc, size, 0)
	return s.place(s.allocs, size), nil
}

// Free implements pool.Source.
func (s *Source) Free(ptr uintptr, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.allocs[ptr]
	if !ok {
		return fmt.Errorf("sim: Free(%#x): not allocated (double free?)", ptr)
	}
	if n != size {
		return fmt.Errorf("sim: Free(%#x, %d): allocated with %d bytes", ptr, size, n)
	}
	delete(s.allocs, ptr)
	s.used -= n
	held.bytes.Add(-n)
	s.charge(CallFree, n, 0)
	return nil
}

// MemInfo implements pool.Source.
func (s *Source) MemInfo() (free, total int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total - s.used, s.total, nil
}

// Granularity implements pool.PageMapper.
func (s *Source) Granularity() int64 { return s.pageSize }

// ReserveAddress implements pool.PageMapper.
func (s *Source) ReserveAddress(size int64) (uintptr, error) {
	if size <= 0 || size%s.pageSize != 0 {
		return 0, fmt.Errorf("sim: ReserveAddress(%d): not a positive multiple of the granularity", size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	held.reserves.Add(1)
	s.charge(CallReserveAddress, size, 0)
	return s.place(s.reserves, size), nil
}

// ReleaseAddress implements pool.PageMapper.
func (s *Source) ReleaseAddress(ptr uintptr, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reserves[ptr] != size {
		return fmt.Errorf("sim: ReleaseAddress(%#x, %d): no such reservation", ptr, size)
	}
	// What is mapped, not every page of the range: a reservation is twice
	// the device, and a replay over many streams releases one per arena.
	for m, n := range s.mappings {
		if m < ptr+uintptr(size) && ptr < m+uintptr(n) {
			return fmt.Errorf("sim: ReleaseAddress(%#x): %#x still mapped", ptr, max(m, ptr))
		}
	}
	delete(s.reserves, ptr)
	held.reserves.Add(-1)
	s.charge(CallReleaseAddress, size, 0)
	return nil
}

// Create implements pool.PageMapper.
func (s *Source) Create(size int64) (uint64, error) {
	if size <= 0 || size%s.pageSize != 0 {
		return 0, fmt.Errorf("sim: Create(%d): not a positive multiple of the granularity", size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.take(size); err != nil {
		return 0, err
	}
	s.charge(CallCreate, size, 0)
	return handles.Add(s.handles, &s.nextHandle, &simHandle{size: size}), nil
}

// Release implements pool.PageMapper.
func (s *Source) Release(h uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	hd, ok := s.handles[h]
	if !ok {
		return fmt.Errorf("sim: Release(%d): no such handle", h)
	}
	if hd.mappings > 0 {
		return fmt.Errorf("sim: Release(%d): still mapped", h)
	}
	delete(s.handles, h)
	s.used -= hd.size
	held.bytes.Add(-hd.size)
	s.charge(CallRelease, hd.size, 0)
	return nil
}

// inReservation reports whether [ptr, ptr+n) lies in one reservation.
func (s *Source) inReservation(ptr uintptr, n int64) bool {
	for base, size := range s.reserves {
		if ptr >= base && ptr+uintptr(n) <= base+uintptr(size) {
			return true
		}
	}
	return false
}

// Map implements pool.PageMapper. As CUDA allows, a handle may be mapped at
// several addresses at once.
func (s *Source) Map(ptr uintptr, size int64, h uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	hd, ok := s.handles[h]
	switch {
	case !ok:
		return fmt.Errorf("sim: Map: handle %d does not exist", h)
	case hd.size != size:
		return fmt.Errorf("sim: Map: handle %d has %d bytes, not %d", h, hd.size, size)
	case int64(ptr)%s.pageSize != 0 || !s.inReservation(ptr, size):
		return fmt.Errorf("sim: Map(%#x, %d): outside any reservation or unaligned", ptr, size)
	}
	for a := ptr; a < ptr+uintptr(size); a += uintptr(s.pageSize) {
		if _, ok := s.granules[a]; ok {
			return fmt.Errorf("sim: Map: %#x is already mapped", a)
		}
	}
	for a := ptr; a < ptr+uintptr(size); a += uintptr(s.pageSize) {
		s.granules[a] = granule{handle: h}
	}
	s.mappings[ptr] = size
	hd.mappings++
	s.charge(CallMap, size, 0)
	return nil
}

// SetAccess implements pool.PageMapper.
func (s *Source) SetAccess(ptr uintptr, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int64(ptr)%s.pageSize != 0 || size <= 0 || size%s.pageSize != 0 {
		return fmt.Errorf("sim: SetAccess(%#x, %d): not whole granules", ptr, size)
	}
	for a := ptr; a < ptr+uintptr(size); a += uintptr(s.pageSize) {
		if _, ok := s.granules[a]; !ok {
			return fmt.Errorf("sim: SetAccess: %#x is not mapped", a)
		}
	}
	for a := ptr; a < ptr+uintptr(size); a += uintptr(s.pageSize) {
		g := s.granules[a]
		g.access = true
		s.granules[a] = g
	}
	s.chargeAccess(ptr, size)
	return nil
}

// chargeAccess prices an access call over [ptr, ptr+size) by its first
// mapping's size and the mappings after it. Called with s.mu held.
func (s *Source) chargeAccess(ptr uintptr, size int64) {
	first, n := size, 0
	for at := ptr; at < ptr+uintptr(size); n++ {
		m, ok := s.mappings[at]
		if !ok {
			break
		}
		if n == 0 {
			first = m
		}
		at += uintptr(m)
	}
	s.charge(CallSetAccess, first, max(n-1, 0))
}

// Unmap implements pool.PageMapper: ptr and size must be one mapping, as
// the strictest reading of cuMemUnmap says.
func (s *Source) Unmap(ptr uintptr, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mappings[ptr] != size {
		return fmt.Errorf("sim: Unmap(%#x, %d): not one whole mapping", ptr, size)
	}
	h := s.granules[ptr].handle
	for a := ptr; a < ptr+uintptr(size); a += uintptr(s.pageSize) {
		delete(s.granules, a)
	}
	delete(s.mappings, ptr)
	s.handles[h].mappings--
	s.charge(CallUnmap, size, 0)
	return nil
}

// Accessible reports whether [ptr, ptr+n) is memory a kernel could touch:
// inside a live allocation, or mapped with access set.
func (s *Source) Accessible(ptr uintptr, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := ptr &^ uintptr(s.pageSize-1)
	// Allocations start on a page and do not overlap, so the only one that
	// can hold ptr is the nearest that starts at or below it: search back
	// page by page, no further than the largest allocation reaches. (A scan
	// of every allocation made the pool's model checks cubic in the number
	// of segments, and stalled the fuzzer.)
	for back := uintptr(0); back <= uintptr(s.maxAlloc) && back <= first; back += uintptr(s.pageSize) {
		if size, ok := s.allocs[first-back]; ok {
			if ptr+uintptr(n) <= first-back+uintptr(size) {
				return true
			}
			break
		}
	}
	for a := first; a < ptr+uintptr(n); a += uintptr(s.pageSize) {
		if g, ok := s.granules[a]; !ok || !g.access {
			return false
		}
	}
	return true
}

// RecordEvent implements pool.EventSource. Events complete at once unless
// the stream is busy (SetBusy).
func (s *Source) RecordEvent(stream uintptr) (uintptr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken[stream] {
		return 0, fmt.Errorf("sim: RecordEvent: stream %#x is broken", stream)
	}
	s.charge(CallRecordEvent, 0, 0)
	return handles.Add(s.events, &s.nextEv, &event{stream: stream, done: !s.busy[stream]}), nil
}

// event returns the event ev, or an error that names op. Called with s.mu
// held.
func (s *Source) event(op string, ev uintptr) (*event, error) {
	e, ok := s.events[ev]
	if !ok {
		return nil, fmt.Errorf("sim: %s(%d): no such event", op, ev)
	}
	return e, nil
}

// EventDone implements pool.EventSource.
func (s *Source) EventDone(ev uintptr) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.event("EventDone", ev)
	if err != nil {
		return false, err
	}
	s.charge(CallEventQuery, 0, 0)
	return e.done, nil
}

// WaitEvent implements pool.EventSource: the simulated work finishes.
func (s *Source) WaitEvent(ev uintptr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.event("WaitEvent", ev)
	if err != nil {
		return err
	}
	e.done = true
	s.charge(CallWaitEvent, 0, 0)
	return nil
}

// DestroyEvent implements pool.EventSource.
func (s *Source) DestroyEvent(ev uintptr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := handles.Take(s.events, ev); !ok {
		return fmt.Errorf("sim: DestroyEvent(%d): no such event", ev)
	}
	s.charge(CallDestroyEvent, 0, 0)
	return nil
}

// SetBusy makes events recorded on stream stay incomplete (busy) or
// completes every event of the stream (not busy).
func (s *Source) SetBusy(stream uintptr, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy[stream] = busy
	if !busy {
		for _, e := range s.events {
			if e.stream == stream {
				e.done = true
			}
		}
	}
}

// Break makes every later RecordEvent on stream fail, as on a stream the
// driver destroyed.
func (s *Source) Break(stream uintptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.broken[stream] = true
}

// Repair undoes Break: events can be recorded on stream again.
func (s *Source) Repair(stream uintptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.broken, stream)
}

// Used returns the bytes of capacity in use: live allocations and pages.
func (s *Source) Used() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// Counts returns the calls served so far.
func (s *Source) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// Live reports what is still held: allocations, handles, reservations and
// events. All zero after a pool has been emptied and closed.
func (s *Source) Live() (allocs, handles, reserves, events int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.allocs), len(s.handles), len(s.reserves), len(s.events)
}

// held sums what every Source in the process holds, for [Held].
var held struct{ bytes, reserves atomic.Int64 }

// Held reports the bytes of capacity and the address reservations that
// every Source in the process still holds. Both are zero once each pool
// built on a Source has been closed: a test's TestMain checks it to catch a
// pool left open, which the garbage collector would hide.
func Held() (bytes, reserves int64) { return held.bytes.Load(), held.reserves.Load() }

// Plain returns s without page mapping: a source for classic segments.
func (s *Source) Plain() *PlainSource { return &PlainSource{s} }

// PlainSource is a Source whose pages are hidden; see [Source.Plain].
type PlainSource struct{ s *Source }

// Alloc implements pool.Source.
func (p *PlainSource) Alloc(size int64) (uintptr, error) { return p.s.Alloc(size) }

// Free implements pool.Source.
func (p *PlainSource) Free(ptr uintptr, size int64) error { return p.s.Free(ptr, size) }

// MemInfo implements pool.Source.
func (p *PlainSource) MemInfo() (int64, int64, error) { return p.s.MemInfo() }

// RecordEvent implements pool.EventSource.
func (p *PlainSource) RecordEvent(stream uintptr) (uintptr, error) { return p.s.RecordEvent(stream) }

// EventDone implements pool.EventSource.
func (p *PlainSource) EventDone(ev uintptr) (bool, error) { return p.s.EventDone(ev) }

// WaitEvent implements pool.EventSource.
func (p *PlainSource) WaitEvent(ev uintptr) error { return p.s.WaitEvent(ev) }

// DestroyEvent implements pool.EventSource.
func (p *PlainSource) DestroyEvent(ev uintptr) error { return p.s.DestroyEvent(ev) }
