package pool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
)

// Pool is a caching allocator over a Source. Make one with [New]. All
// methods are safe for concurrent use.
//
// Pool is the coordinator: it takes a request through the front cache, the
// arenas and the growth of an arena in turn, and every public operation
// starts here. The parts it coordinates live below it, one type a file
// (docs/pool.md draws them).
type Pool struct {
	src  Source
	opts options

	closed   atomic.Bool
	observer atomic.Pointer[func(ctx context.Context, alloc bool, b Block)] // Observe's function, or nil

	front frontCache // freed small blocks, by stream and size, and the peaks

	// growMu serializes the work that calls the source to change what the
	// pool holds: growth, moving pages, releasing memory. It is held across
	// driver calls; mu never is. Cache hits never take it.
	growMu sync.Mutex

	mu      sync.Mutex // protects the fields below, and every arena
	arenas  arenaSet   // the arenas, by stream and size class
	ledger  ledger     // what the pool holds from the source, and its counters
	streams streams    // blocks held for other streams' work, and retired streams
	pages   *expander  // the growth of arenas by mapping pages; nil for classic segments
}

// New returns a Pool that takes memory from src.
func New(src Source, opts ...Option) (*Pool, error) {
	if src == nil {
		return nil, prefixed.Errorf("pool", "nil Source")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	p := &Pool{src: src, opts: o}
	p.arenas = arenaSet{guard: &p.mu, maxSplit: o.maxSplit, byKey: make(map[arenaKey]*arena)}
	events, _ := src.(EventSource)
	p.streams = streams{mu: &p.mu, events: events, arenas: &p.arenas}
	p.ledger.mu = &p.mu
	p.ledger.limit.Store(o.limit)
	// The device's size bounds what can ever be allocated and sizes the
	// address space reserved; a source that cannot say is still usable,
	// unless a limit is a fraction of it.
	_, total, err := src.MemInfo()
	if err != nil {
		if o.limitFraction > 0 {
			return nil, prefixed.Wrap("pool", err, "MaxReservedFraction needs the device's total memory")
		}
		total = 0
	}
	p.ledger.total = total
	if o.limitFraction > 0 {
		limit, err := p.ledger.fractionOf(o.limitFraction)
		if err != nil {
			return nil, err
		}
		p.ledger.limit.Store(limit)
	}
	if err := p.capHolds(p.ledger.limit.Load(), o.capOption(), "leave the cap out for none"); err != nil {
		return nil, err
	}
	if err := p.setUpExpansion(); err != nil {
		return nil, err
	}
	n := o.shards
	if n == 0 {
		n = shardsPerP * runtime.GOMAXPROCS(0)
	}
	p.front = newFrontCache(n)
	return p, nil
}

// shardsPerP is the front cache's shards per P where Shards does not say.
const shardsPerP = 2

// setUpExpansion makes the arenas expandable where the source maps pages
// and the options allow it.
func (p *Pool) setUpExpansion() error {
	m, ok := p.src.(PageMapper)
	if !ok || p.opts.expansion == ExpandNever {
		if p.opts.expansion == ExpandAlways {
			return prefixed.Errorf("pool", "Expand(ExpandAlways): the source cannot map pages")
		}
		return nil
	}
	e, err := newExpander(m, p.ledger.total, p.opts.growthStep)
	if err != nil {
		return err
	}
	if p.opts.maxSplit != math.MaxInt64 {
		return prefixed.Errorf("pool", "MaxSplitSize applies to classic segments; this source maps pages (add Expand(ExpandNever))")
	}
	e.mu, e.arenas, e.ledger, e.streams = &p.mu, &p.arenas, &p.ledger, &p.streams
	p.pages = e
	p.arenas.expandable = true
	// Reserve the default stream's address space now, so that its first
	// allocations pay for memory only. Address space holds no memory;
	// where the source refuses it here, the first growth asks again and
	// reports the failure there.
	for _, small := range []bool{true, false} {
		if err := e.reserve(p.arenas.get(arenaKey{stream: 0, small: small}), 0); err != nil {
			break
		}
	}
	return nil
}

// Expandable reports whether the pool's arenas grow by mapping pages.
func (p *Pool) Expandable() bool { return p.pages != nil }

// Alloc allocates size bytes for the default stream.
func (p *Pool) Alloc(size int64) (Block, error) { return p.AllocContext(context.Background(), size, 0) }

// AllocContext allocates size bytes for use on stream. The block may be
// reused at once on the same stream after it is freed.
//
// ctx matters only when memory is short: before it fails, the pool waits for
// the work on other streams that still holds freed blocks (see
// [Pool.RecordUse]), and it stops waiting when ctx is done, returning an
// error that is both ErrOutOfMemory and ctx's error. A cached allocation
// never looks at it.
//
// Small requests (up to 1 MiB) are served from the front cache when it holds
// a block of the same rounded size. Large ones always take the best fit from
// their arena, where freed blocks have coalesced with their free neighbours:
// reusing a large block where it was, as a size-keyed cache does, keeps
// free memory split around it and makes the arena grow on dynamic shapes
// (docs/pool.md, "Large blocks", says why; docs/measurements.md has the
// figures).
func (p *Pool) AllocContext(ctx context.Context, size int64, stream uintptr) (Block, error) {
	if size <= 0 || size > MaxSize {
		return Block{}, invalidSize(size)
	}
	b, sh, peak, err := p.takeBlock(ctx, roundSize(size), size, stream, nil)
	if err != nil {
		return Block{}, err
	}
	return p.handedOut(ctx, sh, b, size, stream, peak), nil
}

// AllocCharged is AllocContext for a caller that accounts for the memory it
// takes, as a scope charges its limits: charge is called with the bytes the
// allocation takes (size rounded up to a multiple of 512, as [Rounded]
// says) before any memory is taken, and an error from it fails the
// allocation with that error, taking nothing; where the allocation then
// fails, charge is called again with the negated bytes (its error is
// ignored). So a size is checked and rounded once, here, and the caller's
// limits refuse without taking memory. charge must not call the pool.
func (p *Pool) AllocCharged(ctx context.Context, size int64, stream uintptr, charge func(bytes int64) error) (Block, error) {
	if size <= 0 || size > MaxSize {
		return Block{}, invalidSize(size)
	}
	b, sh, peak, err := p.takeBlock(ctx, roundSize(size), size, stream, charge)
	if err != nil {
		return Block{}, err
	}
	return p.handedOut(ctx, sh, b, size, stream, peak), nil
}

// invalidSize is AllocContext's error for a size out of (0, MaxSize], kept
// out of line: inlined, its formatting grows AllocContext's frame.
//
//go:noinline
func invalidSize(size int64) error {
	return prefixed.Kind("pool", ErrInvalidSize, "%d bytes", size)
}

// takeBlock finds a block of r bytes for a request of size bytes on stream: from
// the front cache, another shard's, or the arenas, first charging r where
// charge is not nil (AllocCharged). It returns the shard that handed it out
// and whether that raised the shard's peak.
func (p *Pool) takeBlock(ctx context.Context, r, size int64, stream uintptr, charge func(int64) error) (b *block, sh *shard, peak bool, err error) {
	if p.closed.Load() {
		return nil, nil, false, errClosed
	}
	if charge != nil {
		if err = charge(r); err != nil {
			return nil, nil, false, err
		}
	}
	if r > smallMax {
		if b, err = p.allocSlow(ctx, r, size, stream); err != nil {
			uncharge(charge, r)
			return nil, nil, false, err
		}
		sh = p.front.lock()
		peak = sh.handOut(b, r, size)
		sh.mu.Unlock()
		return b, sh, peak, nil
	}
	sh = p.front.lock()
	key := cacheKey{stream, r}
	if b = sh.popLast(key); b == nil {
		sh.mu.Unlock()
		// Another shard may cache a block of this size: taking it keeps
		// where blocks land independent of which shard this goroutine
		// happens to use, so placement, and the memory it wastes, do not
		// depend on scheduling.
		if b = p.front.steal(key, sh); b == nil {
			if b, err = p.allocSlow(ctx, r, size, stream); err != nil {
				uncharge(charge, r)
				return nil, nil, false, err
			}
		}
		sh.mu.Lock()
	}
	peak = sh.handOut(b, r, size)
	sh.mu.Unlock()
	return b, sh, peak, nil
}

// uncharge gives back r bytes that charge took for an allocation that
// failed.
func uncharge(charge func(int64) error, r int64) {
	if charge != nil {
		_ = charge(-r)
	}
}

// handedOut finishes an allocation of b from sh for ctx: the peak, the
// observer, and the Block itself.
func (p *Pool) handedOut(ctx context.Context, sh *shard, b *block, size int64, stream uintptr, peak bool) Block {
	if peak {
		p.front.notePeak(sh)
	}
	blk := Block{ptr: b.ptr, size: size, stream: stream, blk: b, gen: b.gen}
	if o := p.observer.Load(); o != nil {
		(*o)(ctx, true, blk)
	}
	return blk
}

// Observe makes the pool call fn after every allocation (alloc true) and
// at every free, before the block can be handed out again, so that the
// calls' order is one the allocations could have had; nil stops it. ctx is
// the allocation's (AllocContext's), so that fn can tell who allocated;
// context.Background() at a free. fn is called from the allocating and
// freeing goroutines, concurrently, and must not call the pool. A device's
// recording (gpu.Device.StartRecording) uses it.
func (p *Pool) Observe(fn func(ctx context.Context, alloc bool, b Block)) {
	if fn == nil {
		p.observer.Store(nil)
		return
	}
	p.observer.Store(&fn)
}

// Free returns b to the pool. It is reused at once on its stream, and on
// other streams once the work queued at the free has completed. Freeing a
// block twice, or a block of another pool, is an error that changes nothing.
func (p *Pool) Free(b Block) error {
	blk := b.blk
	if blk == nil {
		return prefixed.Kind("pool", ErrInvalidBlock, "zero Block")
	}
	sh := p.front.lockOwner(blk)
	if sh == nil || blk.live != b.gen {
		if sh != nil {
			sh.mu.Unlock()
		}
		if blk.seg.guard != &p.mu {
			return prefixed.Kind("pool", ErrInvalidBlock, "block at %#x belongs to another pool", b.ptr)
		}
		return prefixed.Kind("pool", ErrInvalidBlock, "block at %#x (%d bytes) was already freed", b.ptr, b.size)
	}
	blk.live = 0
	if o := p.observer.Load(); o != nil {
		(*o)(context.Background(), false, b) // before the block can be handed out again
	}
	// The block goes back to the shard that handed it out, which is the
	// freeing goroutine's own in the common case and saves finding the
	// goroutine's shard again.
	usedElsewhere := len(blk.uses) > 0
	cache := !usedElsewhere && blk.key <= smallMax
	sh.accountFree(blk.size, blk.requested)
	if cache {
		sh.push(cacheKey{b.stream, blk.key}, blk)
	} else {
		disown(blk)
	}
	sh.mu.Unlock()
	switch {
	case usedElsewhere:
		return p.freeUsedElsewhere(blk)
	case !cache:
		p.mu.Lock()
		p.arenas.of(blk.seg).release(blk) // both inline: no call before the free set
		p.mu.Unlock()
	}
	if p.closed.Load() || p.opts.releaseThreshold != math.MaxInt64 {
		return p.afterFree()
	}
	return nil
}

// freeUsedElsewhere holds blk, freed, until the work of the other streams
// that used it has completed. After Close nothing else looks at the blocks
// held, so it gives back then what it can. Kept out of line: inlined, its
// errors.Join grows Free's frame.
//
//go:noinline
func (p *Pool) freeUsedElsewhere(blk *block) error {
	err := p.streams.freeAfterEvents(blk)
	if p.closed.Load() {
		return errors.Join(err, p.afterFree())
	}
	return err
}

// afterFree gives memory back where a free leaves too much cached: all of
// it after Close, and what passes the release threshold.
func (p *Pool) afterFree() error {
	if p.closed.Load() {
		// A block freed after Close: everything it held goes back now.
		return errors.Join(p.EmptyCache(), p.releaseAddressSpace())
	}
	if p.opts.releaseThreshold != math.MaxInt64 &&
		p.ledger.reservedNow.Load()-p.front.allocated() > p.opts.releaseThreshold {
		return p.EmptyCache()
	}
	return nil
}

// allocSlow takes a block from the arena, growing it if needed. Cached
// small blocks are moved back to their arenas first, so that best fit sees
// every free byte coalesced.
func (p *Pool) allocSlow(ctx context.Context, r, size int64, stream uintptr) (*block, error) {
	key := arenaKey{stream: stream, small: r <= smallMax}
	p.mu.Lock()
	if p.streams.retired[stream] {
		p.mu.Unlock()
		return nil, prefixed.Errorf("pool", "allocating on stream %#x, which was retired", stream)
	}
	if len(p.streams.pending) > 0 {
		p.mu.Unlock()
		if err := p.streams.collectPending(); err != nil {
			return nil, err
		}
		p.mu.Lock()
	}
	a := p.arenas.get(key)
	if key.small {
		p.front.drain(&p.arenas)
	}
	b := a.take(r)
	p.mu.Unlock()
	if b != nil {
		return b, nil
	}
	return p.grow(ctx, a, r, size)
}

// maxGrowAttempts bounds the rounds of grow: each round grows the arena or
// frees memory, and a few always suffice.
const maxGrowAttempts = 64

// grow makes room in a for r bytes and takes a block. On running out of
// memory it moves what can move, then waits for the blocks held for other
// streams (until ctx is done), releases the cache and retries once.
func (p *Pool) grow(ctx context.Context, a *arena, r, size int64) (*block, error) {
	if p.ledger.tooLarge(r) {
		// No release of the cache can make room for it.
		return nil, p.oomError(size, a.key.stream, nil)
	}
	p.growMu.Lock()
	defer p.growMu.Unlock()
	if p.closed.Load() {
		// It passed the check at its start, and Close has emptied the pool
		// since: growing now would leave memory nobody releases.
		return nil, errClosed
	}
	retried, squeeze := false, false
	for range maxGrowAttempts {
		if b := p.take(a, r); b != nil {
			return b, nil
		}
		b, err := p.growOnce(a, r, squeeze)
		if b != nil {
			return b, nil
		}
		if err == nil {
			continue
		}
		oom := errors.Is(err, ErrOutOfMemory)
		if oom && squeeze && a.key.small {
			// Moving did not make room: before the cache goes, the
			// large arena's free memory, already mapped (arenaSet.lend).
			if b := p.lend(a.key.stream, r); b != nil {
				return b, nil
			}
		}
		if oom && a.expandable && !squeeze {
			// Before the cache goes, move what can move.
			squeeze = true
			continue
		}
		if !oom {
			return nil, err
		}
		if retried {
			return nil, p.oomError(size, a.key.stream, err)
		}
		retried = true
		b, rerr := p.makeRoom(ctx, a, r)
		if rerr != nil {
			return nil, errors.Join(p.oomError(size, a.key.stream, err), rerr)
		}
		if b != nil {
			return b, nil
		}
	}
	return nil, prefixed.Errorf("pool", "bug: no block after growing the arena %d times for %d bytes", maxGrowAttempts, r)
}

// take takes a block of r bytes from a, or nil.
func (p *Pool) take(a *arena, r int64) *block {
	p.mu.Lock()
	defer p.mu.Unlock()
	return a.take(r)
}

// lend takes a block of r bytes for a small request of stream from the
// stream's large arena, or nil (arenaSet.lend).
func (p *Pool) lend(stream uintptr, r int64) *block {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.arenas.lend(stream, r)
}

// growOnce grows a once for r bytes: by mapping pages, which returns no
// block, or by a new classic segment, which returns the block. Called with
// growMu held.
func (p *Pool) growOnce(a *arena, r int64, squeeze bool) (*block, error) {
	if a.expandable {
		return nil, p.pages.grow(a, r, squeeze)
	}
	return p.growClassic(a, r)
}

// makeRoom is the retry of an allocation out of memory: it waits for the
// blocks held for other streams, takes a block where they freed one, and
// else releases the cache. Called with growMu held.
func (p *Pool) makeRoom(ctx context.Context, a *arena, r int64) (*block, error) {
	p.mu.Lock()
	p.ledger.counts.Retries++
	p.mu.Unlock()
	if err := p.streams.waitPending(ctx); err != nil {
		return nil, err
	}
	// The blocks other streams held may serve it where they are:
	// releasing the cache first would return them to the source only
	// to take new memory back.
	if b := p.take(a, r); b != nil {
		return b, nil
	}
	return nil, p.releaseCachedLocked(ctx)
}

// growClassic adds a whole segment to a and takes r bytes from it. Called
// with growMu held.
func (p *Pool) growClassic(a *arena, r int64) (*block, error) {
	size := classicSegmentSize(r, a.key.small)
	if err := p.ledger.checkLimit(size); err != nil {
		return nil, err
	}
	ptr, err := p.src.Alloc(size)
	if err != nil {
		return nil, markOutOfMemory(err)
	}
	if ptr%Alignment != 0 {
		// Blocks are multiples of 512 bytes from their segment's start: an
		// unaligned segment would misalign every one of them.
		err := prefixed.Errorf("pool", "the source returned %#x for %s, not aligned to %d bytes", ptr, units.FormatBytes(size), Alignment)
		return nil, errors.Join(err, p.src.Free(ptr, size))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := a.addSegment(ptr, size)
	p.ledger.counts.Segments++
	p.ledger.counts.SourceAllocs++
	p.ledger.addReserved(size)
	return a.takeBlock(s.first, r), nil
}

// oomError describes an allocation of size bytes on stream that failed
// with err (nil: too large for the device or the limit), and counts it.
func (p *Pool) oomError(size int64, stream uintptr, err error) error {
	free, total, merr := p.src.MemInfo()
	if merr != nil {
		free, total = -1, -1
	}
	var cause error
	var so sourceOOM
	if errors.As(err, &so) {
		cause = so.err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ledger.counts.OOMs++
	return &OOMError{Requested: size, Stream: stream, Allocated: p.front.allocated(), Reserved: p.ledger.counts.Reserved,
		Limit: p.ledger.limit.Load(), DeviceFree: free, DeviceTotal: total, Err: cause,
		LargestFree: p.arenas.largestFree(), Page: p.leastReserved()}
}

// EmptyCache returns every cached byte it can to the source: fully free
// segments, and in expandable arenas every handle under a free block. It
// first waits for the work on other streams that still holds freed blocks
// (see [Pool.RecordUse]), as PyTorch's empty_cache does. Live blocks are
// untouched. Memory of a stream that cannot be waited for (an error from
// the source) is kept, and the error returned; other streams' is released.
func (p *Pool) EmptyCache() error {
	p.growMu.Lock()
	defer p.growMu.Unlock()
	return errors.Join(p.emptyCacheLocked(), p.releaseRetiredLocked())
}

// emptyCacheLocked is EmptyCache's release of the cache, with growMu held:
// it waits for the other streams' work first.
func (p *Pool) emptyCacheLocked() error {
	ctx := context.Background()
	return errors.Join(p.streams.waitPending(ctx), p.releaseCachedLocked(ctx))
}

// releaseCachedLocked is EmptyCache with growMu held. Memory of a stream
// whose work has not completed when ctx is done is kept.
func (p *Pool) releaseCachedLocked(ctx context.Context) error {
	errs := []error{p.streams.collectPending()}
	p.mu.Lock()
	p.front.drain(&p.arenas)
	segs, moving, movingH := p.takeReleasable()
	p.mu.Unlock()
	// Work on a stream that cannot be waited for may still use its memory:
	// keep that stream's, release the rest.
	failed, werr := p.streams.wait(ctx, streamsOf(segs, moving))
	if len(failed) > 0 {
		errs = append(errs, werr)
		segs, moving, movingH = p.keepBusy(failed, segs, moving, movingH)
	}
	errs = append(errs, p.freeSegments(segs)...)
	if p.pages != nil {
		errs = append(errs, p.pages.release(moving, movingH))
	}
	return errors.Join(errs...)
}

// takeReleasable takes out of the arenas what can go back to the source:
// the classic segments that are wholly free, and the handles wholly under
// free blocks of expandable arenas, their blocks marked moving. Called with
// mu held.
func (p *Pool) takeReleasable() (segs []*segment, moving []*block, movingH []*handle) {
	for _, a := range p.arenas.byKey {
		if a.expandable {
			mv, hs := p.pages.isolateFree(a)
			moving, movingH = append(moving, mv...), append(movingH, hs...)
			continue
		}
		segs = append(segs, a.takeFreeSegments()...)
	}
	return segs, moving, movingH
}

// keepBusy puts back what takeReleasable took of the streams in failed,
// whose work may still use it, and returns the rest.
func (p *Pool) keepBusy(failed map[uintptr]bool, segs []*segment, moving []*block, movingH []*handle) ([]*segment, []*block, []*handle) {
	p.mu.Lock()
	defer p.mu.Unlock()
	segs = slices.DeleteFunc(segs, func(s *segment) bool {
		if !failed[s.key.stream] {
			return false
		}
		p.arenas.of(s).restoreSegment(s)
		return true
	})
	keep := moving[:0]
	keepH := movingH[:0]
	for i, mv := range moving {
		if failed[mv.seg.key.stream] {
			p.arenas.release(mv)
			continue
		}
		keep, keepH = append(keep, mv), append(keepH, movingH[i])
	}
	return segs, keep, keepH
}

// freeSegments returns classic segments to the source. A segment the source
// will not take back is kept: it is still the pool's, and nothing is lost.
func (p *Pool) freeSegments(segs []*segment) []error {
	var errs []error
	for _, s := range segs {
		err := p.src.Free(s.ptr, s.size)
		p.mu.Lock()
		if err != nil {
			p.arenas.of(s).restoreSegment(s)
			errs = append(errs, prefixed.Wrap("pool", err, "returning a %d-byte segment to the source", s.size))
		} else {
			p.ledger.counts.Segments--
			p.ledger.counts.SourceFrees++
			p.ledger.addReserved(-s.size)
		}
		p.mu.Unlock()
	}
	return errs
}

// Close releases everything the pool caches and makes later allocations
// fail with ErrClosed. If blocks are still live it returns an error saying
// how many; their memory is released when they are freed. Close is
// idempotent.
func (p *Pool) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := p.EmptyCache() // which waits for the held blocks first
	st := p.Stats()
	if st.ActiveBlocks > 0 {
		return errors.Join(err, prefixed.Errorf("pool", "closed with %s (%s) still allocated",
			units.Count(st.ActiveBlocks, "block"), units.FormatBytes(st.Allocated)))
	}
	return errors.Join(err, p.releaseAddressSpace())
}

// releaseAddressSpace returns the reservations of address space that hold
// nothing any more. Close does it, and so does a free after Close.
func (p *Pool) releaseAddressSpace() error {
	p.growMu.Lock()
	defer p.growMu.Unlock()
	return p.releaseAddressSpaceLocked(false)
}

// releaseRetiredLocked gives back the address space of retired streams'
// arenas that hold nothing, and drops those arenas: a stream per request
// must not leave a reservation per request behind. Called with growMu
// held, by EmptyCache (RetireStream's among them).
func (p *Pool) releaseRetiredLocked() error {
	if !p.streams.anyRetired() {
		return nil
	}
	return p.releaseAddressSpaceLocked(true)
}

// releaseAddressSpaceLocked is releaseAddressSpace with growMu held, for
// every arena or, with retiredOnly, those of retired streams, which are
// dropped once they hold no segment.
func (p *Pool) releaseAddressSpaceLocked(retiredOnly bool) error {
	p.mu.Lock()
	var retired map[uintptr]bool
	if retiredOnly {
		retired = p.streams.retired
	}
	segs := p.arenas.takeEmptyReservations(retired)
	p.mu.Unlock()
	if p.pages == nil {
		return nil
	}
	return p.pages.releaseAddress(segs)
}

// Stats returns a snapshot of the pool's counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statsLocked(false)
}

// statsLocked is Stats with p.mu held, and every shard's mu too where
// shardsLocked (Snapshot holds them all).
func (p *Pool) statsLocked(shardsLocked bool) Stats {
	st := p.ledger.counts
	for _, a := range p.arenas.byKey {
		if !a.expandable {
			continue
		}
		for _, s := range a.segments {
			if len(s.mapped) > 0 { // address space alone is no memory
				st.Segments++
			}
		}
	}
	p.front.addStats(&st, shardsLocked)
	for _, a := range p.arenas.byKey {
		st.CachedBlocks += int64(a.free.len())
	}
	st.PeakAllocated = max(p.front.peakAllocated.Load(), st.Allocated)
	st.ActiveBlocks = st.Allocs - st.Frees
	st.PeakActiveBlocks = max(p.front.peakBlocks.Load(), st.ActiveBlocks)
	st.Cached = st.Reserved - st.Allocated
	return st
}

// ResetPeaks sets every peak to its current value.
func (p *Pool) ResetPeaks() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ledger.counts.PeakReserved = p.ledger.counts.Reserved
	p.front.resetPeaks()
}

// Snapshot returns the layout of the pool's memory and its counters, of one
// moment. It holds the pool's locks while it copies, so it is for
// diagnostics, not a hot path.
func (p *Pool) Snapshot() Snapshot {
	p.growMu.Lock()
	defer p.growMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	// The shards guard whether a block in use is allocated or cached.
	p.front.lockAll()
	defer p.front.unlockAll()
	var idle []*handle
	if p.pages != nil {
		idle = p.pages.idle
	}
	return snapshotOf(p.statsLocked(true), &p.arenas, idle) // with the blocks, not before them
}

// RecordUse tells the pool that work on stream, besides b's own stream, uses
// b (PyTorch's record_stream). When b is freed the pool records an event on
// each such stream and reuses b only after they have completed.
func (p *Pool) RecordUse(b Block, stream uintptr) error {
	blk := b.blk
	notLive := prefixed.Kind("pool", ErrInvalidBlock, "RecordUse on a block that is not live")
	if blk == nil || blk.seg.guard != &p.mu {
		return notLive
	}
	sh := p.front.lockOwner(blk)
	if sh == nil {
		return notLive
	}
	live := blk.live == b.gen
	sh.mu.Unlock()
	if !live {
		return notLive
	}
	if stream == b.stream {
		return nil
	}
	if p.streams.isRetired(stream) {
		return prefixed.Errorf("pool", "RecordUse on stream %#x, which was retired", stream)
	}
	if p.streams.events == nil {
		return prefixed.Errorf("pool", "RecordUse: the source has no streams or events")
	}
	p.streams.recordUse(blk, stream)
	return nil
}

// WaitForUses waits until the work queued so far has completed on b's own
// stream and on every other stream that used it ([Pool.RecordUse]), but
// for except: the stream the caller queues its next work on, after that
// work in order. A device that zeroes freed memory calls it before the
// zeros, so that they land after every write of the block's owner.
func (p *Pool) WaitForUses(b Block, except uintptr) error {
	blk := b.blk
	if blk == nil || blk.seg.guard != &p.mu {
		return prefixed.Kind("pool", ErrInvalidBlock, "WaitForUses on a block of another pool, or none")
	}
	streams := p.streams.usersOf(blk, b.stream)
	streams = slices.DeleteFunc(streams, func(s uintptr) bool { return s == except })
	_, err := p.streams.wait(context.Background(), streams)
	return err
}

// RetireStream tells the pool that stream is about to be destroyed: it
// waits until the work queued on it so far has completed, and from then on
// treats the stream as idle, recording and waiting for no event on it, so
// that EmptyCache and Close keep working once the source no longer knows
// the stream. The memory the pool caches for it is released (what is still
// allocated on it goes back to its arena when freed, and is released by
// the next EmptyCache). Call it after the last work on the stream is
// queued and before the stream is destroyed.
func (p *Pool) RetireStream(stream uintptr) error {
	if stream == 0 {
		return prefixed.Errorf("pool", "RetireStream: the default stream is never retired")
	}
	if p.streams.events == nil {
		return nil
	}
	if _, err := p.streams.wait(context.Background(), []uintptr{stream}); err != nil {
		return err
	}
	p.streams.retire(stream)
	return p.EmptyCache()
}

// MaxReserved returns the most bytes the pool reserves; 0 means no cap.
func (p *Pool) MaxReserved() int64 { return p.ledger.limit.Load() }

// SetMaxReserved changes the cap on the bytes the pool reserves while it
// runs, as PyTorch's set_per_process_memory_fraction and CuPy's set_limit
// do; 0 removes the cap. Lowering the cap below what the pool reserves gives
// back at once what is cached (as [Pool.EmptyCache] does, waiting first for
// the work of other streams on freed blocks) and makes later growth fail
// with ErrOutOfMemory while it would pass the cap. Live blocks are never
// touched: the pool may stay above the cap until they are freed, and gives
// back what they held when EmptyCache or a later SetMaxReserved runs.
//
// A negative cap is an error that changes nothing; so is a cap below one
// page (see [MaxReserved]), and a call after Close. The error otherwise is what giving back memory failed with (the
// new cap holds all the same). Safe for concurrent use with allocations.
func (p *Pool) SetMaxReserved(bytes int64) error {
	if bytes < 0 {
		return prefixed.Kind("pool", ErrInvalidSize, "SetMaxReserved(%d): the cap must not be negative (0 removes it)", bytes)
	}
	if err := p.capHolds(bytes, "", "0 to remove the cap"); err != nil {
		return err
	}
	if p.closed.Load() {
		return errClosed
	}
	// Under growMu no growth is half done: each one after this sees the
	// new cap from its start.
	p.growMu.Lock()
	defer p.growMu.Unlock()
	p.mu.Lock()
	p.ledger.limit.Store(bytes)
	over := bytes > 0 && p.ledger.counts.Reserved > bytes
	p.mu.Unlock()
	if !over {
		return nil
	}
	return p.emptyCacheLocked()
}

// leastReserved is the least the pool reserves from its source at once:
// one of the source's pages where arenas map them, a segment of small
// blocks where not. A cap below it holds nothing.
func (p *Pool) leastReserved() int64 {
	if m, ok := p.src.(PageMapper); ok && p.opts.expansion != ExpandNever {
		return max(m.Granularity(), Alignment) // setUpExpansion makes the arenas map pages
	}
	return smallSegment
}

// capHolds returns an error where limit, a cap (0: none), is below the
// least the pool reserves at once: no allocation could ever fit under it.
// call names the option that set it, where the message should (a caller
// of SetMaxReserved knows what it called, and may call it from C); none
// says how the caller does without a cap.
func (p *Pool) capHolds(limit int64, call, none string) error {
	least := p.leastReserved()
	if limit <= 0 || limit >= least {
		return nil
	}
	if call != "" {
		call += ": "
	}
	return prefixed.Kind("pool", ErrInvalidSize, "%sa cap of %s is below one page of %s, the least the pool reserves at once, "+
		"so no allocation could ever fit; give at least %d bytes, or %s", call, units.WithBytes(limit), units.FormatBytes(least), least, none)
}

// Charge counts n bytes that the caller holds from the pool's source
// itself in the pool's Reserved and against its cap, as if the pool held
// them: a pool of its own over the same device (a sleepable scope's, in
// package gpu), so that one cap covers both and each grows only within
// what the other leaves. Stats.Reserved and PeakReserved include them.
//
// Where n more bytes would pass the cap, Charge first gives back what the
// pool caches, as EmptyCache does, and fails with an *OOMError
// (ErrOutOfMemory) where the cap still has no room, counting nothing and
// counting no out-of-memory error of the pool's: the caller's allocation
// is the one that failed. A negative n gives back bytes charged before,
// and never fails. A positive n fails with ErrClosed after Close.
func (p *Pool) Charge(n int64) error {
	if n <= 0 {
		p.mu.Lock()
		p.ledger.addReserved(n)
		p.mu.Unlock()
		return nil
	}
	if p.closed.Load() {
		return errClosed
	}
	// Under growMu no growth is half done, and none begins: the room the
	// cap has is the room it will have.
	p.growMu.Lock()
	defer p.growMu.Unlock()
	var released error
	for retried := false; ; retried = true {
		p.mu.Lock()
		if !p.ledger.overLimit(n) {
			p.ledger.addReserved(n)
			p.mu.Unlock()
			return nil
		}
		p.mu.Unlock()
		if retried && released != nil {
			return errors.Join(p.chargeRefused(n), released)
		}
		if retried {
			return p.chargeRefused(n)
		}
		released = p.emptyCacheLocked()
	}
}

// chargeRefused is the error of a Charge of n bytes that the cap refused,
// with the pool's figures.
func (p *Pool) chargeRefused(n int64) error {
	free, total, err := p.src.MemInfo()
	if err != nil {
		free, total = -1, -1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return &OOMError{Requested: n, Allocated: p.front.allocated(), Reserved: p.ledger.counts.Reserved,
		Limit: p.ledger.limit.Load(), DeviceFree: free, DeviceTotal: total}
}

// SetMaxReservedFraction is [Pool.SetMaxReserved] with the cap given as a
// fraction in (0, 1] of the device's total memory, as the source reported it
// when the pool was made.
func (p *Pool) SetMaxReservedFraction(f float64) error {
	limit, err := p.ledger.fractionOf(f)
	if err == nil {
		err = p.capHolds(limit, fmt.Sprintf("SetMaxReservedFraction(%v)", f), "SetMaxReserved(0) to remove the cap")
	}
	if err != nil {
		return err
	}
	return p.SetMaxReserved(limit)
}
