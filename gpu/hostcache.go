package gpu

import (
	"errors"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/scope"
)

// hostCache keeps a device's page-locked host memory for reuse, as
// PyTorch's CachingHostAllocator and CuPy's PinnedMemoryPool do: a block
// that a HostSlice gives back goes to the free list of its size class once
// the stream work recorded on it has completed, and the next AllocHost of
// that class takes it without a driver call. A block given back with work
// outstanding waits on the pending list with an event per stream; the list
// is read lazily, when a block is wanted, oldest first, up to the first
// whose work still runs: no synchronize on the hot path. The driver is
// never called with mu held.
//
// Beside the free lists, each class has a hot slot: a block given back
// with no stream work waits there, outside mu, for the next AllocHost of
// its class, which takes it with one compare-and-swap. The counters under
// mu see such a block as still allocated; snapshot and the drains (drainHot)
// move it to the cached ones.
type hostCache struct {
	dev     *Device
	drv     driver.HostAllocator // nil: the device has no page-locked memory
	events  driver.Driver        // records and queries the blocks' events
	dropped func(error)          // where errors no caller receives go

	hot     [numHostClasses]atomic.Pointer[hostBlock] // one free block a class, outside mu
	hotHits atomic.Int64                              // blocks AllocHost took from a hot slot
	shut    atomic.Bool                               // closed, for the hot slots' users

	mu      sync.Mutex // protects the fields below
	reaped  sync.Cond  // on mu: a reap finished (close waits for it)
	free    [numHostClasses][]*hostBlock
	pending []*hostBlock // given back with stream work outstanding, oldest first
	unfreed []*hostBlock // blocks the driver's HostFree failed on: cached still, tried again by EmptyCache and Close
	reaping bool         // a goroutine reads pending[0]'s events outside mu
	emptied uint64       // EmptyCache calls: a block pending before the last goes to the driver once done
	closed  bool
	stats   hostStats
}

// hostStats are the cache's counters, which Stats shows as its Pinned
// fields: bytes as the size classes round them.
type hostStats struct {
	Allocated, ActiveBlocks, Cached, CachedBlocks, Pending int64 // now
	Hits, Misses, DriverFrees                              int64 // totals
}

// snapshot returns the counters, the blocks in hot slots counted as
// cached.
func (c *hostCache) snapshot() hostStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats
	for i := range c.hot {
		if b := c.hot[i].Load(); b != nil {
			st.Allocated -= b.size
			st.ActiveBlocks--
			st.Cached += b.size
			st.CachedBlocks++
		}
	}
	st.Hits += c.hotHits.Load()
	return st
}

// drainHot moves the blocks in hot slots to the free lists. Called with mu
// held.
func (c *hostCache) drainHot() {
	for i := range c.hot {
		if b := c.hot[i].Swap(nil); b != nil {
			c.leaveLocked(b, false)
			c.free[i] = append(c.free[i], b)
		}
	}
}

// hostBlock is one HostAlloc of the size of its class. A HostSlice names
// it with its generation: one that names an older generation is stale, and
// never reaches the memory.
type hostBlock struct {
	cache *hostCache
	p     unsafe.Pointer
	size  int64
	class int // -1: a size no class holds; given back, never kept

	// gen is the generation a HostSlice of the block may use: AllocHost
	// hands out the current one, and a Free or the scope's end moves it on
	// (one compare-and-swap). A use counts itself in users before it reads
	// gen, and an end waits for users after it moved gen on, so that no use
	// runs once the block goes back (quiesce).
	gen  atomic.Uint64
	held uint64 // the generation AllocHost handed out last: end moves it on
	// Who gives the block back: Free where it disowned the scope's record,
	// else the scope, ending, through final (end). Only that one reads held
	// or the streams, so none reads them while the block serves another.
	users   atomic.Int32 // uses running: Use, queuing a copy
	waiters atomic.Int32 // ends waiting in quiesce, under wmu
	wmu     sync.Mutex
	wcond   sync.Cond    // on wmu: the last use left
	final   func() error // end, made once: every HostSlice's Final in its scope
	last    scope.Owned  // the record of the HostSlice Free ended last, which its scope may Reown

	smu     sync.Mutex // protects streams, which uses append to
	streams []uintptr  // streams that copies to or from the HostSlice were queued on

	events []uintptr // recorded when given back, one per stream that used it
	epoch  uint64    // hostCache.emptied when it went pending
}

// usedOn records that a copy to or from the block is queued on stream.
func (b *hostBlock) usedOn(stream uintptr) {
	b.smu.Lock()
	defer b.smu.Unlock()
	if !slices.Contains(b.streams, stream) {
		b.streams = append(b.streams, stream)
	}
}

// enter counts a use of the HostSlice of generation gen and reports
// whether it may run; a use that entered leaves, whatever it reported.
func (b *hostBlock) enter(gen uint64) bool {
	b.users.Add(1)
	return b.gen.Load() == gen
}

// leave ends a use, waking an end that waits for the last.
func (b *hostBlock) leave() {
	if b.users.Add(-1) == 0 && b.waiters.Load() > 0 {
		b.wmu.Lock()
		b.wcond.Broadcast()
		b.wmu.Unlock()
	}
}

// quiesce waits until no use runs. gen has moved on: a use that enters now
// finds its generation ended and leaves at once.
func (b *hostBlock) quiesce() {
	if b.users.Load() == 0 {
		return
	}
	b.wmu.Lock()
	b.waiters.Add(1)
	for b.users.Load() != 0 {
		b.wcond.Wait()
	}
	b.waiters.Add(-1)
	b.wmu.Unlock()
}

// end ends the block's HostSlice, if no Free has, and gives the block back
// to the cache. Its one caller is whoever holds the HostSlice's record in
// the scope: the scope, ending (final), or AllocHost where owning failed.
// A Free that disowned the record ended the HostSlice and gives it back.
func (b *hostBlock) end() error {
	b.gen.CompareAndSwap(b.held, b.held+1)
	b.quiesce() // a Free that moved gen on may still wait for uses
	return b.giveBack()
}

// giveBack gives the block, whose HostSlice has ended, back to the cache
// with the streams that used it. Its caller alone holds the block: no use
// runs, and none records a stream (they do inside a use, and find the
// generation ended).
func (b *hostBlock) giveBack() error {
	streams := b.streams
	b.streams = b.streams[:0] // the next owner appends once put has read them
	return b.cache.put(b, streams)
}

// Size classes: one of 4 KiB (the smallest page a driver pins), then four
// per doubling (5/4, 6/4, 7/4 and 8/4 of the power of two below). A request
// pins under a fifth more than it asked for, where rounding to a power of
// two (PyTorch, CuPy) pins up to twice: page-locked memory is RAM the
// system cannot page out. Sizes past 2^62 are not rounded, nor kept.
const (
	minHostClassLog = 12
	maxHostClassLog = 62
	numHostClasses  = 1 + (maxHostClassLog-minHostClassLog)*4
)

// hostClass returns the size class of a request of size bytes and the
// class's size.
func hostClass(size int64) (int, int64) {
	if size <= 1<<minHostClassLog {
		return 0, 1 << minHostClassLog
	}
	e := bits.Len64(uint64(size - 1)) // 2^(e-1) < size <= 2^e
	if e > maxHostClassLog {
		return -1, size
	}
	shift := e - 3
	quarters := (size + 1<<shift - 1) >> shift // 5 to 8 quarters of 2^(e-1)
	return 1 + (e-minHostClassLog-1)*4 + int(quarters) - 5, quarters << shift
}

// init readies the cache of d.
func (c *hostCache) init(d *Device) {
	c.dev = d
	c.drv, _ = d.drv.(driver.HostAllocator)
	c.events = d.drv
	c.dropped = d.dropped
	c.reaped.L = &c.mu
}

// get returns a block for a request of size bytes: a cached one of its
// class whose stream work is done, or a new one.
func (c *hostCache) get(size int64) (*hostBlock, error) {
	class, rounded := hostClass(size)
	if class >= 0 && !c.shut.Load() {
		if b := c.hot[class].Load(); b != nil && c.hot[class].CompareAndSwap(b, nil) {
			c.hotHits.Add(1)
			return b, nil
		}
	}
	c.mu.Lock()
	if len(c.pending) > 0 && !c.reaping {
		c.mu.Unlock()
		c.reap()
		c.mu.Lock()
	}
	if c.closed {
		c.mu.Unlock()
		return nil, driver.ErrClosed
	}
	if class >= 0 {
		if l := c.free[class]; len(l) > 0 {
			b := l[len(l)-1]
			l[len(l)-1] = nil
			c.free[class] = l[:len(l)-1]
			c.stats.Hits++
			c.stats.Cached -= b.size
			c.stats.CachedBlocks--
			c.stats.Allocated += b.size
			c.stats.ActiveBlocks++
			c.mu.Unlock()
			return b, nil
		}
	}
	c.mu.Unlock()
	return c.alloc(class, rounded)
}

// alloc asks the driver for a block; where it has no room, the cache gives
// back what it holds and asks once more, as the pool does.
func (c *hostCache) alloc(class int, size int64) (*hostBlock, error) {
	p, err := c.drv.HostAlloc(size)
	if err != nil && errdefs.IsSourceOutOfMemory(err) {
		if freed, ferr := c.release(); freed > 0 && ferr == nil {
			p, err = c.drv.HostAlloc(size)
		}
	}
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.stats.Misses++
	c.stats.Allocated += size
	c.stats.ActiveBlocks++
	c.mu.Unlock()
	b := &hostBlock{cache: c, p: p, size: size, class: class}
	b.final = b.end
	b.wcond.L = &b.wmu
	return b, nil
}

// put takes back a block whose HostSlice has ended, that copies on streams
// used: kept at once where no stream used it, else once an event recorded
// now on each has completed.
func (c *hostCache) put(b *hostBlock, streams []uintptr) error {
	if len(streams) == 0 && b.class >= 0 && !c.shut.Load() && c.hot[b.class].CompareAndSwap(nil, b) {
		// A close that began meanwhile may have drained the slots before
		// b came: take it back, unless the drain did.
		if !c.shut.Load() || !c.hot[b.class].CompareAndSwap(b, nil) {
			return nil
		}
	}
	b.events = b.events[:0]
	for _, st := range streams {
		ev, err := c.events.RecordEvent(st)
		if errdefs.IsStreamGone(err) {
			continue // destroyed, so its work is done
		}
		if err != nil {
			// Its work cannot be followed: the driver's free waits for it.
			c.leave(b, false)
			return errors.Join(prefixed.Wrap("gpu", err, "giving back page-locked memory"), c.giveBack([]*hostBlock{b}))
		}
		b.events = append(b.events, ev)
	}
	c.mu.Lock()
	if c.closed || b.class < 0 {
		c.mu.Unlock()
		c.leave(b, false)
		return c.giveBack([]*hostBlock{b})
	}
	c.leaveLocked(b, len(b.events) > 0)
	if len(b.events) == 0 {
		c.free[b.class] = append(c.free[b.class], b)
	} else {
		b.epoch = c.emptied
		c.pending = append(c.pending, b)
	}
	c.mu.Unlock()
	return nil
}

// leave moves b's bytes from the allocated counts to the cached ones.
func (c *hostCache) leave(b *hostBlock, pending bool) {
	c.mu.Lock()
	c.leaveLocked(b, pending)
	c.mu.Unlock()
}

func (c *hostCache) leaveLocked(b *hostBlock, pending bool) {
	c.stats.Allocated -= b.size
	c.stats.ActiveBlocks--
	c.stats.Cached += b.size
	c.stats.CachedBlocks++
	if pending {
		c.stats.Pending += b.size
	}
}

// reap moves the pending blocks whose stream work has completed, oldest
// first up to the first whose work still runs, to the free lists, or to
// the driver where an EmptyCache came after them. One goroutine reaps at a
// time; it queries the events outside mu, owning the block it queries.
func (c *hostCache) reap() {
	c.mu.Lock()
	if c.reaping || c.closed {
		c.mu.Unlock()
		return
	}
	c.reaping = true
	var back []*hostBlock
	var errs []error
	for len(c.pending) > 0 && !c.closed {
		b := c.pending[0]
		c.mu.Unlock()
		done, err := c.eventsDone(b)
		c.mu.Lock()
		if !done && err == nil {
			break
		}
		c.pending[0] = nil
		c.pending = c.pending[1:]
		c.stats.Pending -= b.size
		errs = append(errs, err)
		if !done || b.epoch < c.emptied {
			back = append(back, b)
		} else {
			c.free[b.class] = append(c.free[b.class], b)
		}
	}
	c.reaping = false
	c.reaped.Broadcast()
	c.mu.Unlock()
	if err := errors.Join(append(errs, c.giveBack(back))...); err != nil {
		c.dropped(prefixed.Wrap("gpu", err, "page-locked memory's stream work"))
	}
}

// eventsDone reports whether every event of b has completed, destroying
// those that have. An event the driver fails to destroy is done all the
// same: the device keeps it for EmptyCache and Close to destroy, and the
// error says so.
func (c *hostCache) eventsDone(b *hostBlock) (bool, error) {
	var errs []error
	for i, ev := range b.events {
		done, err := c.events.EventDone(ev)
		if err != nil {
			b.events = b.events[i:]
			return false, errors.Join(append(errs, err)...)
		}
		if !done {
			b.events = b.events[i:]
			return false, errors.Join(errs...)
		}
		errs = append(errs, c.dev.destroyEvent(ev))
	}
	b.events = b.events[:0]
	return true, errors.Join(errs...)
}

// giveBack frees blocks held in the cache through the driver, destroying
// the events they still have: the driver's free waits for their work. A
// block the driver fails to free stays the cache's, counted as cached,
// and the next EmptyCache or Close tries again.
func (c *hostCache) giveBack(blocks []*hostBlock) error {
	var errs []error
	for _, b := range blocks {
		for _, ev := range b.events {
			errs = append(errs, c.dev.destroyEvent(ev))
		}
		b.events = nil
		err := c.drv.HostFree(b.p)
		c.mu.Lock()
		if err != nil {
			c.unfreed = append(c.unfreed, b)
			errs = append(errs, prefixed.Wrap("gpu", err, "freeing %s of page-locked memory (kept for the next EmptyCache)", Bytes(b.size)))
		} else {
			c.stats.Cached -= b.size
			c.stats.CachedBlocks--
			c.stats.DriverFrees++
		}
		c.mu.Unlock()
	}
	return errors.Join(errs...)
}

// release gives the free blocks back to the driver, and the pending ones
// once their work is done, and returns how many bytes went back now.
// EmptyCache calls it; so does an allocation the driver had no room for.
func (c *hostCache) release() (int64, error) {
	c.mu.Lock()
	c.drainHot()
	c.emptied++
	back := c.unfreed
	c.unfreed = nil
	var bytes int64
	for i, l := range c.free {
		for _, b := range l {
			bytes += b.size
		}
		back = append(back, l...)
		c.free[i] = nil
	}
	c.mu.Unlock()
	err := c.giveBack(back)
	c.reap() // what is done by now goes back at once
	return bytes, err
}

// close waits for pending blocks' work and gives every block back; a
// block still in a HostSlice goes back when the HostSlice ends. The
// device's scopes have ended before: their blocks are in the cache.
func (c *hostCache) close() error {
	c.shut.Store(true)
	c.mu.Lock()
	c.closed = true
	c.drainHot()
	for c.reaping {
		c.reaped.Wait()
	}
	back := append(c.pending, c.unfreed...)
	c.pending, c.unfreed = nil, nil
	c.stats.Pending = 0
	for i, l := range c.free {
		back = append(back, l...)
		c.free[i] = nil
	}
	c.mu.Unlock()
	var errs []error
	for _, b := range back {
		for _, ev := range b.events {
			errs = append(errs, c.events.WaitEvent(ev))
		}
	}
	return errors.Join(append(errs, c.giveBack(back))...)
}
