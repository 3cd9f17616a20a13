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
	"unsafe"
)

// Pool is a caching allocator over a Source. Make one with [New]. All
// methods are safe for concurrent use.
type Pool struct {
	src    Source
	events EventSource // nil where the source has no events
	mapper PageMapper  // nil unless arenas are expandable
	gran   int64       // the mapper's granularity
	vaSize int64       // address space each expandable segment reserves
	opts   options
	limit  atomic.Int64 // MaxReserved in bytes; 0 means none. Changed under mu and growMu (SetMaxReserved)
	total  int64        // the device's bytes, as MemInfo said when the pool was made; 0: unknown

	closed   atomic.Bool
	observer atomic.Pointer[func(alloc bool, b Block)] // Observe's function, or nil

	reservedNow atomic.Int64 // copy of reserved for lock-free reads

	// peakAllocated is raised when a shard passes its own high-water mark;
	// see shard.account. Current bytes are counted per shard, so that the
	// hit path writes no shared cache line.
	_             [64]byte
	peakAllocated atomic.Int64
	peakBlocks    atomic.Int64 // the same, for live blocks
	_             [64]byte

	shards    []shard
	stackKeys []atomic.Uintptr // per shard, the stack of the goroutine that used it last (see lockShard); read-mostly
	claims    atomic.Uint32    // shards claimed by goroutines new to them (see findShard)

	// growMu serializes the work that calls the source to change what the
	// pool holds: growth, moving pages, releasing memory. It is held across
	// driver calls; mu never is. Cache hits never take it.
	growMu sync.Mutex

	mu            sync.Mutex // protects the fields below and every arena
	arenas        map[arenaKey]*arena
	defaultArenas [2]*arena        // the default stream's large and small arenas, found without the map
	idle          []*handle        // handles held but mapped nowhere
	pending       []*block         // freed blocks waiting for events on other streams
	retired       map[uintptr]bool // streams RetireStream took out of use
	reserved      int64
	peakReserved  int64
	segments      int64
	sourceAllocs  int64
	sourceFrees   int64
	handles       int64 // handles held, mapped or idle
	growths       int64
	pagesMapped   int64
	pagesMoved    int64
	ooms          int64
	retries       int64
}

// New returns a Pool that takes memory from src.
func New(src Source, opts ...Option) (*Pool, error) {
	if src == nil {
		return nil, errors.New("pool: nil Source")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	p := &Pool{src: src, opts: o, arenas: make(map[arenaKey]*arena)}
	p.limit.Store(o.limit)
	p.events, _ = src.(EventSource)
	// The device's size bounds what can ever be allocated and sizes the
	// address space reserved; a source that cannot say is still usable,
	// unless a limit is a fraction of it.
	_, total, err := src.MemInfo()
	if err != nil {
		if o.limitFraction > 0 {
			return nil, fmt.Errorf("pool: MaxReservedFraction needs the device's total memory: %w", err)
		}
		total = 0
	}
	p.total = total
	if o.limitFraction > 0 {
		if total <= 0 {
			return nil, fmt.Errorf("pool: MaxReservedFraction needs the device's total memory, and the source reports %d", total)
		}
		p.limit.Store(int64(o.limitFraction * float64(total)))
	}
	if m, ok := src.(PageMapper); ok && o.expansion != ExpandNever {
		p.mapper = m
		p.gran = m.Granularity()
		if p.gran <= 0 || p.gran&(p.gran-1) != 0 {
			return nil, fmt.Errorf("pool: source granularity %d is not a power of two", p.gran)
		}
		// Address space is cheap and pages move: reserve twice the device
		// so that holes never leave too little contiguous room.
		va := total
		if va <= 0 || va > MaxSize {
			va = MaxSize / 64
		}
		p.vaSize = 2 * p.granules(va) * p.gran
		p.opts.growthStep = p.granules(p.opts.growthStep) * p.gran
		if o.maxSplit != math.MaxInt64 {
			return nil, errors.New("pool: MaxSplitSize applies to classic segments; this source maps pages (add Expand(ExpandNever))")
		}
	} else if o.expansion == ExpandAlways {
		return nil, errors.New("pool: Expand(ExpandAlways): the source cannot map pages")
	}
	n := o.shards
	if n == 0 {
		n = 2 * runtime.GOMAXPROCS(0)
	}
	p.shards = make([]shard, n)
	p.stackKeys = make([]atomic.Uintptr, n)
	return p, nil
}

// Expandable reports whether the pool's arenas grow by mapping pages.
func (p *Pool) Expandable() bool { return p.mapper != nil }

// Alloc allocates size bytes for the default stream.
func (p *Pool) Alloc(size int64) (Block, error) { return p.AllocContext(context.Background(), size, 0) }

// AllocOn allocates size bytes for use on stream.
func (p *Pool) AllocOn(size int64, stream uintptr) (Block, error) {
	return p.AllocContext(context.Background(), size, stream)
}

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
// (docs/pool.md has the figures).
func (p *Pool) AllocContext(ctx context.Context, size int64, stream uintptr) (Block, error) {
	if size <= 0 || size > MaxSize {
		return Block{}, fmt.Errorf("%w: %d bytes", ErrInvalidSize, size)
	}
	if p.closed.Load() {
		return Block{}, ErrClosed
	}
	r := roundSize(size)
	if r > smallMax {
		b, err := p.allocSlow(ctx, r, size, stream)
		if err != nil {
			return Block{}, err
		}
		sh := p.lockShard()
		peak := sh.handOut(b, r, size)
		sh.mu.Unlock()
		return p.handedOut(sh, b, size, stream, peak), nil
	}
	sh := p.lockShard()
	key := cacheKey{stream, r}
	b := sh.pop(key)
	if b == nil {
		sh.mu.Unlock()
		// Another shard may cache a block of this size: taking it keeps
		// where blocks land independent of which shard this goroutine
		// happens to use, so placement, and the memory it wastes, do not
		// depend on scheduling.
		if b = p.stealExact(key, sh); b == nil {
			var err error
			if b, err = p.allocSlow(ctx, r, size, stream); err != nil {
				return Block{}, err
			}
		}
		sh.mu.Lock()
	}
	peak := sh.handOut(b, r, size)
	sh.mu.Unlock()
	return p.handedOut(sh, b, size, stream, peak), nil
}

// handedOut finishes an allocation of b from sh: the peak, the observer,
// and the Block itself.
func (p *Pool) handedOut(sh *shard, b *block, size int64, stream uintptr, peak bool) Block {
	if peak {
		p.notePeak(sh)
	}
	blk := Block{ptr: b.ptr, size: size, stream: stream, blk: b, gen: b.gen}
	if o := p.observer.Load(); o != nil {
		(*o)(true, blk)
	}
	return blk
}

// Observe makes the pool call fn after every allocation (alloc true) and
// at every free, before the block can be handed out again, so that the
// calls' order is one the allocations could have had; nil stops it. fn is
// called from the allocating and freeing goroutines, concurrently, and must
// not call the pool. A device's recording (gpu.Device.StartRecording) uses
// it.
func (p *Pool) Observe(fn func(alloc bool, b Block)) {
	if fn == nil {
		p.observer.Store(nil)
		return
	}
	p.observer.Store(&fn)
}

// notePeak raises the peaks to what is live now, summed over the shards,
// and hands out the thresholds again. The shards' thresholds (highWater,
// liveHigh) always add up to the peak; a shard passes its own only by
// allocating, and then calls notePeak. While the sum holds, the total
// cannot pass the peak without some shard passing its threshold: so the
// peaks are exact for one goroutine, whichever shards it uses. sh gets
// what the other shards' thresholds leave of the peak; where that is less
// than it holds, the others are cut to what they hold and sh gets the
// rest. A shard that frees keeps its threshold, so goroutines that
// allocate and free on their own shards settle with no calls here. Under
// concurrent allocation the sum is taken a little after the allocation
// that passed, so the peak can miss what frees in between gave back: a
// lower bound there.
//
// It holds every shard's lock at once, in order, so that the sum is one
// instant; callers hold none.
func (p *Pool) notePeak(sh *shard) {
	for i := range p.shards {
		p.shards[i].mu.Lock()
	}
	var total, blocks, highs, lives int64
	for i := range p.shards {
		s := &p.shards[i]
		total += s.allocated
		blocks += s.allocs - s.frees
		if s != sh {
			highs += s.highWater
			lives += s.liveHigh
		}
	}
	raise(&p.peakAllocated, total)
	raise(&p.peakBlocks, blocks)
	peak, peakBlocks := p.peakAllocated.Load(), p.peakBlocks.Load()
	if sh.highWater = peak - highs; sh.highWater < sh.allocated {
		for i := range p.shards {
			s := &p.shards[i]
			s.highWater = s.allocated
		}
		sh.highWater += peak - total
	}
	if sh.liveHigh = peakBlocks - lives; sh.liveHigh < sh.allocs-sh.frees {
		for i := range p.shards {
			s := &p.shards[i]
			s.liveHigh = s.allocs - s.frees
		}
		sh.liveHigh += peakBlocks - blocks
	}
	for i := range p.shards {
		p.shards[i].mu.Unlock()
	}
}

// allocatedNow sums the shards' allocated bytes. It locks each shard in
// turn, so it is for the rare paths: a new peak, a release threshold, an
// out-of-memory report.
func (p *Pool) allocatedNow() int64 {
	var n int64
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		n += s.allocated
		s.mu.Unlock()
	}
	return n
}

// raise sets peak to v if v is larger.
func raise(peak *atomic.Int64, v int64) {
	for {
		old := peak.Load()
		if v <= old || peak.CompareAndSwap(old, v) {
			return
		}
	}
}

// Free returns b to the pool. It is reused at once on its stream, and on
// other streams once the work queued at the free has completed. Freeing a
// block twice, or a block of another pool, is an error that changes nothing.
func (p *Pool) Free(b Block) error {
	blk := b.blk
	if blk == nil {
		return fmt.Errorf("%w: zero Block", ErrInvalidBlock)
	}
	sh := p.lockOwner(blk)
	if sh == nil || !p.owns(sh) || blk.live != b.gen {
		if sh != nil {
			sh.mu.Unlock()
		}
		if blk.seg.arena.pool != p {
			return fmt.Errorf("%w: block at %#x belongs to another pool", ErrInvalidBlock, b.ptr)
		}
		return fmt.Errorf("%w: block at %#x (%d bytes) was already freed", ErrInvalidBlock, b.ptr, b.size)
	}
	blk.live = 0
	if o := p.observer.Load(); o != nil {
		(*o)(false, b) // before the block can be handed out again
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
		return p.freeAfterEvents(blk)
	case !cache:
		p.mu.Lock()
		blk.seg.arena.release(blk)
		p.mu.Unlock()
	}
	if p.closed.Load() {
		// A block freed after Close: everything it held goes back now.
		return errors.Join(p.EmptyCache(), p.releaseAddressSpace())
	}
	if p.opts.releaseThreshold != math.MaxInt64 &&
		p.reservedNow.Load()-p.allocatedNow() > p.opts.releaseThreshold {
		return p.EmptyCache()
	}
	return nil
}

// owns reports whether sh is one of p's shards.
func (p *Pool) owns(sh *shard) bool {
	i := (uintptr(unsafe.Pointer(sh)) - uintptr(unsafe.Pointer(&p.shards[0]))) / unsafe.Sizeof(*sh)
	return i < uintptr(len(p.shards)) && &p.shards[i] == sh
}

// lockOwner locks and returns the shard that holds blk, which guards its
// state; nil where no shard does (blk is in an arena: not allocated).
func (p *Pool) lockOwner(blk *block) *shard {
	for {
		sh := blk.shard.Load()
		if sh == nil {
			return nil
		}
		sh.mu.Lock()
		if blk.shard.Load() == sh {
			return sh
		}
		sh.mu.Unlock() // it moved while we waited
	}
}

// allocSlow takes a block from the arena, growing it if needed. Cached
// small blocks are moved back to their arenas first, so that best fit sees
// every free byte coalesced.
func (p *Pool) allocSlow(ctx context.Context, r, size int64, stream uintptr) (*block, error) {
	key := arenaKey{stream: stream, small: r <= smallMax}
	p.mu.Lock()
	if p.retired[stream] {
		p.mu.Unlock()
		return nil, fmt.Errorf("pool: allocating on stream %#x, which was retired", stream)
	}
	if len(p.pending) > 0 {
		p.mu.Unlock()
		if err := p.collectPending(); err != nil {
			return nil, err
		}
		p.mu.Lock()
	}
	a := p.arenaLocked(key)
	if key.small {
		p.drainShards()
	}
	b := a.take(r)
	p.mu.Unlock()
	if b != nil {
		return b, nil
	}
	return p.grow(ctx, a, r, size)
}

func (p *Pool) arenaLocked(key arenaKey) *arena {
	if key.stream == 0 && p.defaultArenas[b2i(key.small)] != nil {
		return p.defaultArenas[b2i(key.small)]
	}
	a := p.arenas[key]
	if a == nil {
		a = &arena{key: key, pool: p, expandable: p.mapper != nil, maxSplit: p.opts.maxSplit}
		p.arenas[key] = a
		if key.stream == 0 {
			p.defaultArenas[b2i(key.small)] = a
		}
	}
	return a
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// grow makes room in a for r bytes and takes a block. On running out of
// memory it moves what can move, then waits for the blocks parked for other
// streams (until ctx is done), releases the cache and retries once.
func (p *Pool) grow(ctx context.Context, a *arena, r, size int64) (*block, error) {
	if limit := p.limit.Load(); p.total > 0 && r > p.total || limit > 0 && r > limit {
		// No release of the cache can make room for it.
		return nil, p.oomError(size, a.key.stream, nil)
	}
	p.growMu.Lock()
	defer p.growMu.Unlock()
	if p.closed.Load() {
		// It passed the check at its start, and Close has emptied the pool
		// since: growing now would leave memory nobody releases.
		return nil, ErrClosed
	}
	retried, squeeze := false, false
	for range 64 {
		p.mu.Lock()
		b := a.take(r)
		p.mu.Unlock()
		if b != nil {
			return b, nil
		}
		var err error
		if a.expandable {
			err = p.growExpandable(a, r, squeeze)
		} else if b, err = p.growClassic(a, r); b != nil {
			return b, nil
		}
		if err == nil {
			continue
		}
		if errors.Is(err, ErrOutOfMemory) && a.expandable && !squeeze {
			// Before the cache goes, move what can move.
			squeeze = true
			continue
		}
		if !errors.Is(err, ErrOutOfMemory) || retried {
			if errors.Is(err, ErrOutOfMemory) {
				return nil, p.oomError(size, a.key.stream, err)
			}
			return nil, err
		}
		retried = true
		p.mu.Lock()
		p.retries++
		p.mu.Unlock()
		if werr := p.waitPending(ctx); werr != nil {
			return nil, errors.Join(p.oomError(size, a.key.stream, err), werr)
		}
		// The blocks other streams held may serve it where they are:
		// releasing the cache first would return them to the source only
		// to take new memory back.
		p.mu.Lock()
		b = a.take(r)
		p.mu.Unlock()
		if b != nil {
			return b, nil
		}
		if rerr := p.releaseCachedLocked(ctx); rerr != nil {
			return nil, errors.Join(p.oomError(size, a.key.stream, err), rerr)
		}
	}
	return nil, fmt.Errorf("pool: bug: no block after growing the arena 64 times for %d bytes", r)
}

// sourceOOM marks an out-of-memory error from the source or from the limit.
type sourceOOM struct{ err error }

func (e sourceOOM) Error() string {
	if e.err == nil {
		return "pool limit reached"
	}
	return e.err.Error()
}
func (e sourceOOM) Is(target error) bool { return target == ErrOutOfMemory }
func (e sourceOOM) Unwrap() error        { return e.err }

// classify turns a source error into sourceOOM where it means no room.
func classify(err error) error {
	if IsSourceOutOfMemory(err) {
		return sourceOOM{err}
	}
	return err
}

// checkLimit returns the out-of-memory error of the limit where reserving n
// more bytes would break it.
func (p *Pool) checkLimit(n int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.overLimit(n) {
		return sourceOOM{}
	}
	return nil
}

// overLimit reports whether reserving n more bytes breaks the limit.
// Called with p.mu held.
func (p *Pool) overLimit(n int64) bool {
	limit := p.limit.Load()
	return limit > 0 && p.reserved+n > limit
}

func (p *Pool) addReserved(n int64) {
	p.reserved += n
	p.reservedNow.Store(p.reserved)
	if p.reserved > p.peakReserved {
		p.peakReserved = p.reserved
	}
}

// growClassic adds a whole segment to a and takes r bytes from it. Called
// with growMu held.
func (p *Pool) growClassic(a *arena, r int64) (*block, error) {
	size := classicSegmentSize(r, a.key.small)
	if err := p.checkLimit(size); err != nil {
		return nil, err
	}
	ptr, err := p.src.Alloc(size)
	if err != nil {
		return nil, classify(err)
	}
	if ptr%Alignment != 0 {
		// Blocks are multiples of 512 bytes from their segment's start: an
		// unaligned segment would misalign every one of them.
		err := fmt.Errorf("pool: the source returned %#x for %s, not aligned to %d bytes", ptr, FormatBytes(size), Alignment)
		return nil, errors.Join(err, p.src.Free(ptr, size))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := a.addSegment(ptr, size)
	p.segments++
	p.sourceAllocs++
	p.addReserved(size)
	return a.takeBlock(s.first, r), nil
}

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
	p.ooms++
	e := &OOMError{Requested: size, Stream: stream, Allocated: p.allocatedNow(), Reserved: p.reserved,
		Limit: p.limit.Load(), DeviceFree: free, DeviceTotal: total, Err: cause}
	for _, a := range p.arenas {
		e.LargestFree = max(e.LargestFree, a.free.largest())
	}
	return e
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
	return errors.Join(p.waitPending(context.Background()), p.releaseCachedLocked(context.Background()),
		p.releaseRetiredLocked())
}

// releaseCachedLocked is EmptyCache with growMu held. Memory of a stream
// whose work has not completed when ctx is done is kept.
func (p *Pool) releaseCachedLocked(ctx context.Context) error {
	errs := []error{p.collectPending()}
	p.mu.Lock()
	p.drainShards()
	var segs []*segment
	var moving []*block
	var movingH []*handle
	for _, a := range p.arenas {
		if a.expandable {
			for _, b := range append([]*block(nil), a.free.blocks...) {
				for _, hd := range b.seg.mappedIn(b.ptr, b.end()) {
					moving = append(moving, p.isolate(hd, b))
					movingH = append(movingH, hd)
				}
			}
			continue
		}
		for _, s := range append([]*segment(nil), a.segments...) {
			if s.fullyFree() {
				a.removeSegment(s)
				segs = append(segs, s)
			}
		}
	}
	p.mu.Unlock()
	// Work on a stream that cannot be waited for may still use its memory:
	// keep that stream's, release the rest.
	failed, werr := p.waitStreams(ctx, streamsOf(segs, moving))
	if len(failed) > 0 {
		errs = append(errs, werr)
		p.mu.Lock()
		segs = slices.DeleteFunc(segs, func(s *segment) bool {
			if !failed[s.arena.key.stream] {
				return false
			}
			s.arena.segments = append(s.arena.segments, s)
			s.arena.free.insert(s.first)
			return true
		})
		keep := moving[:0]
		keepH := movingH[:0]
		for i, mv := range moving {
			if failed[mv.seg.arena.key.stream] {
				mv.seg.arena.release(mv)
				continue
			}
			keep, keepH = append(keep, mv), append(keepH, movingH[i])
		}
		moving, movingH = keep, keepH
		p.mu.Unlock()
	}
	for _, s := range segs {
		err := p.src.Free(s.ptr, s.size)
		p.mu.Lock()
		if err != nil {
			// Keep the segment: memory the source would not take back is
			// still ours, and nothing is lost.
			s.arena.segments = append(s.arena.segments, s)
			s.arena.free.insert(s.first)
			errs = append(errs, fmt.Errorf("pool: returning a %d-byte segment to the source: %w", s.size, err))
		} else {
			p.segments--
			p.sourceFrees++
			p.addReserved(-s.size)
		}
		p.mu.Unlock()
	}
	if len(moving) == 0 && p.mapper == nil {
		return errors.Join(errs...)
	}
	unmapped, err := p.unmapMoving(moving, movingH)
	errs = append(errs, err)
	p.mu.Lock()
	idle := append(p.idle, unmapped...)
	p.idle = nil
	p.mu.Unlock()
	for i, hd := range idle {
		if err := p.mapper.Release(hd.id); err != nil {
			p.mu.Lock()
			p.idle = append(p.idle, idle[i:]...)
			p.mu.Unlock()
			errs = append(errs, fmt.Errorf("pool: releasing %s: %w", FormatBytes(hd.size), err))
			break
		}
		p.mu.Lock()
		p.sourceFrees++
		p.handles--
		p.addReserved(-hd.size)
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Close releases everything the pool caches and makes later allocations
// fail with ErrClosed. If blocks are still live it returns an error saying
// how many; their memory is released when they are freed. Close is
// idempotent.
func (p *Pool) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := p.EmptyCache() // which waits for the parked blocks first
	st := p.Stats()
	if st.ActiveBlocks > 0 {
		return errors.Join(err, fmt.Errorf("pool: closed with %d blocks (%s) still allocated",
			st.ActiveBlocks, FormatBytes(st.Allocated)))
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

// releaseAddressSpaceLocked is releaseAddressSpace with growMu held, for
// every arena or, with retiredOnly, those of retired streams, which are
// dropped once they hold no segment.
func (p *Pool) releaseAddressSpaceLocked(retiredOnly bool) error {
	p.mu.Lock()
	var segs []*segment
	for k, a := range p.arenas {
		if retiredOnly && !p.retired[k.stream] {
			continue
		}
		for _, s := range append([]*segment(nil), a.segments...) {
			if a.expandable && s.first.state == stateHole && s.first.next == nil {
				a.holes.remove(s.first)
				a.segments = slices.DeleteFunc(a.segments, func(t *segment) bool { return t == s })
				segs = append(segs, s)
			}
		}
		if retiredOnly && len(a.segments) == 0 {
			delete(p.arenas, k)
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, s := range segs {
		if err := p.mapper.ReleaseAddress(s.ptr, s.size); err != nil {
			errs = append(errs, fmt.Errorf("pool: releasing address space: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Stats returns a snapshot of the pool's counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statsLocked(true)
}

// statsLocked is Stats with p.mu held, and every shard's mu too unless
// lockShards (Snapshot holds them all).
func (p *Pool) statsLocked(lockShards bool) Stats {
	st := Stats{
		Reserved:     p.reserved,
		PeakReserved: p.peakReserved,
		Segments:     p.segments,
		SourceAllocs: p.sourceAllocs,
		SourceFrees:  p.sourceFrees,
		Growths:      p.growths,
		PagesMapped:  p.pagesMapped,
		PagesMoved:   p.pagesMoved,
		OOMs:         p.ooms,
		Retries:      p.retries,
	}
	for _, a := range p.arenas {
		if a.expandable {
			st.Segments += int64(len(a.segments))
		}
	}
	for i := range p.shards {
		s := &p.shards[i]
		if lockShards {
			s.mu.Lock()
		}
		st.Allocs += s.allocs
		st.CacheHits += s.hits
		st.Frees += s.frees
		st.Allocated += s.allocated
		st.Requested += s.requested
		st.AllocatedBytes += s.bytesIn
		st.FreedBytes += s.bytesOut
		s.bins.each(func(b *bin) { st.CachedBlocks += int64(len(b.blocks)) })
		if lockShards {
			s.mu.Unlock()
		}
	}
	for _, a := range p.arenas {
		st.CachedBlocks += int64(a.free.len())
	}
	st.PeakAllocated = max(p.peakAllocated.Load(), st.Allocated)
	st.ActiveBlocks = st.Allocs - st.Frees
	st.PeakActiveBlocks = max(p.peakBlocks.Load(), st.ActiveBlocks)
	st.Cached = st.Reserved - st.Allocated
	return st
}

// ResetPeaks sets every peak to its current value.
func (p *Pool) ResetPeaks() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.peakReserved = p.reserved
	// Every shard at once, so that the thresholds add up to the peak (see
	// notePeak).
	for i := range p.shards {
		p.shards[i].mu.Lock()
	}
	var bytes, blocks int64
	for i := range p.shards {
		s := &p.shards[i]
		s.highWater, s.liveHigh = s.allocated, s.allocs-s.frees
		bytes += s.highWater
		blocks += s.liveHigh
	}
	p.peakAllocated.Store(bytes)
	p.peakBlocks.Store(blocks)
	for i := range p.shards {
		p.shards[i].mu.Unlock()
	}
}
