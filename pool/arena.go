package pool

import (
	"slices"
	"sync"

	"github.com/gpuscope/gpuscope/internal/spares"
)

// Sizes that shape the pool. They follow PyTorch's caching allocator, whose
// choices are tuned on real workloads, except where docs/pool.md says why not.
const (
	minBlock      = 512      // every block is a multiple of this
	Alignment     = 256      // every block's address is a multiple of this, as cudaMalloc's are
	smallMax      = 1 << 20  // requests up to this are small
	largeMin      = smallMax // larger requests are large
	smallSegment  = 2 << 20  // classic segment size for small blocks
	midMax        = 10 << 20 // large requests below this share a midSegment
	midSegment    = 20 << 20 // classic segment size for mid-size requests
	segmentRound  = 2 << 20  // larger classic segments round up to this
	oversizeWaste = 20 << 20 // most a request at or above MaxSplitSize may waste
)

// Rounded returns the bytes an allocation of n bytes takes from a pool or a
// Region: n rounded up to a multiple of 512. Scopes charge this to their
// limits.
func Rounded(n int64) int64 { return roundSize(n) }

// MaxSize is the largest size Alloc accepts: 256 TiB, beyond any device.
const MaxSize int64 = 1 << 48

// roundSize rounds a request up to a multiple of minBlock.
func roundSize(n int64) int64 {
	if n < minBlock {
		return minBlock
	}
	return (n + minBlock - 1) &^ (minBlock - 1)
}

// unlimitedSplit is a maxSplit that splits every block: above any size.
const unlimitedSplit = 1 << 62

// arena does best-fit allocation over its segments. Its methods are called
// with guard held.
type arena struct {
	key        arenaKey
	guard      *sync.Mutex // the pool's (or Region's) lock, which guards the arena
	expandable bool
	maxSplit   int64
	free       freeSet // free blocks
	holes      freeSet // unmapped ranges of an expandable segment
	segments   []*segment
	spare      spares.Stack[block] // block objects merged away, for reuse
}

// take returns a free block of at least r bytes, split to size, or nil.
func (a *arena) take(r int64) *block {
	i := a.free.lowerBound(r)
	if i == a.free.len() {
		return nil
	}
	b := a.free.blocks[i]
	if a.expandable {
		// Best fit, except that a block bordering unmapped space is taken
		// only if no other fits: it can grow, so it is kept for the request
		// that needs it to (PyTorch's expandable segments do the same).
		for _, c := range a.free.blocks[i:] {
			if !c.bordersHole() {
				b = c
				break
			}
		}
	}
	if !a.key.small && !a.expandable && a.maxSplit < unlimitedSplit {
		// Oversize blocks serve only oversize requests, and only close fits.
		if r < a.maxSplit && b.size >= a.maxSplit {
			return nil
		}
		if r >= a.maxSplit && b.size >= r+oversizeWaste {
			return nil
		}
	}
	return a.takeBlock(b, r)
}

// takeFit takes the smallest free block of at least r bytes, split to
// size, or nil: best fit with no rule but size (see arenaSet.lend).
func (a *arena) takeFit(r int64) *block {
	i := a.free.lowerBound(r)
	if i == a.free.len() {
		return nil
	}
	return a.takeBlock(a.free.blocks[i], r)
}

// takeBlock takes free block b for r bytes, splitting off the rest where
// that is worth it.
func (a *arena) takeBlock(b *block, r int64) *block {
	a.free.remove(b)
	b.state = stateInUse
	if a.shouldSplit(b.size, r) {
		rest := a.splitAt(b, r)
		rest.state = stateFree
		a.free.insert(rest)
	}
	return b
}

func (a *arena) shouldSplit(size, r int64) bool {
	rest := size - r
	switch {
	case a.key.small || a.expandable:
		return rest >= minBlock
	case size >= a.maxSplit:
		return false
	default:
		return rest > smallMax
	}
}

// release makes b free and merges it with free neighbours.
func (a *arena) release(b *block) {
	b.events, b.uses = b.events[:0], b.uses[:0]
	a.coalesce(b, stateFree, &a.free)
}

// coalesce gives b state st, merges it with neighbours in the same state,
// which set holds, and puts the result in set. The blocks merged away are
// kept for reuse.
func (a *arena) coalesce(b *block, st blockState, set *freeSet) {
	b.state = st
	if p := b.prev; p != nil && p.state == st {
		set.remove(p)
		a.absorbNext(p)
		b = p
	}
	if n := b.next; n != nil && n.state == st {
		set.remove(n)
		a.absorbNext(b)
	}
	set.insert(b)
}

// absorbNext merges b's next neighbour into b and drops the neighbour.
func (a *arena) absorbNext(b *block) {
	n := b.next
	b.size += n.size
	b.next = n.next
	if n.next != nil {
		n.next.prev = b
	}
	a.drop(n)
}

// splitAt cuts b at offset off and returns the new block after it, in no
// state yet.
func (a *arena) splitAt(b *block, off int64) *block {
	nb := a.newBlock()
	nb.ptr, nb.size, nb.seg, nb.prev, nb.next = b.ptr+uintptr(off), b.size-off, b.seg, b, b.next
	if b.next != nil {
		b.next.prev = nb
	}
	b.next = nb
	b.size = off
	return nb
}

// newBlock returns a block object, a spare one where the arena has one, so
// that splitting on the allocation path allocates nothing in steady state.
func (a *arena) newBlock() *block {
	if b := a.spare.Pop(); b != nil {
		return b
	}
	return &block{}
}

// drop keeps b, merged away and free, for newBlock. Its generation and
// segment stay: a stale Block that still points to it must keep failing,
// and Free finds its pool through the segment.
func (a *arena) drop(b *block) {
	b.ptr, b.size, b.prev, b.next = 0, 0, nil, nil
	b.state, b.key, b.requested = stateFree, 0, 0
	b.owner.Store(nil)
	b.events, b.uses = b.events[:0], b.uses[:0]
	a.spare.Push(b)
}

// addSegment adds a classic segment, all of it free, and returns it.
func (a *arena) addSegment(ptr uintptr, size int64) *segment {
	s := &segment{ptr: ptr, size: size, key: a.key, guard: a.guard}
	s.first = &block{ptr: ptr, size: size, seg: s, state: stateFree}
	a.restoreSegment(s)
	return s
}

// restoreSegment puts back a classic segment, all of it free, that
// removeSegment took out.
func (a *arena) restoreSegment(s *segment) {
	a.segments = append(a.segments, s)
	a.free.insert(s.first)
}

// takeFreeSegments removes the classic segments that hold no live block and
// returns them.
func (a *arena) takeFreeSegments() []*segment {
	var segs []*segment
	for _, s := range append([]*segment(nil), a.segments...) {
		if s.fullyFree() {
			a.removeSegment(s)
			segs = append(segs, s)
		}
	}
	return segs
}

// removeSegment drops a classic segment whose one block is free.
func (a *arena) removeSegment(s *segment) {
	a.free.remove(s.first)
	for i, t := range a.segments {
		if t == s {
			a.segments = append(a.segments[:i], a.segments[i+1:]...)
			return
		}
	}
	panic("pool: bug: segment not in its arena")
}

// classicSegmentSize is the segment a request of r rounded bytes gets.
func classicSegmentSize(r int64, small bool) int64 {
	switch {
	case small:
		return smallSegment
	case r < midMax:
		return midSegment
	default:
		return (r + segmentRound - 1) &^ (segmentRound - 1)
	}
}

// addReservation adds a reservation of address space to an expandable
// arena: one segment, all of it a hole.
func (a *arena) addReservation(ptr uintptr, size int64) {
	s := &segment{ptr: ptr, size: size, key: a.key, guard: a.guard}
	s.first = &block{ptr: ptr, size: size, seg: s, state: stateHole}
	a.segments = append(a.segments, s)
	a.holes.insert(s.first)
}

// takeEmptyReservations removes the reservations of an expandable arena
// that have nothing mapped and returns them.
func (a *arena) takeEmptyReservations() []*segment {
	var segs []*segment
	for _, s := range append([]*segment(nil), a.segments...) {
		if a.expandable && s.empty() {
			a.holes.remove(s.first)
			a.segments = slices.DeleteFunc(a.segments, func(t *segment) bool { return t == s })
			segs = append(segs, s)
		}
	}
	return segs
}

// fillHole turns n bytes of hole h at at, now mapped, into a free block.
func (a *arena) fillHole(h *block, at uintptr, n int64) {
	a.holes.remove(h)
	nb := a.newBlock()
	nb.ptr, nb.size, nb.seg, nb.state = at, n, h.seg, stateInUse
	switch {
	case at == h.ptr && n == h.size:
		nb.prev, nb.next = h.prev, h.next
		if h.prev != nil {
			h.prev.next = nb
		} else {
			h.seg.first = nb
		}
		if h.next != nil {
			h.next.prev = nb
		}
	case at == h.ptr:
		nb.prev, nb.next = h.prev, h
		if h.prev != nil {
			h.prev.next = nb
		} else {
			h.seg.first = nb
		}
		h.prev = nb
		h.ptr += uintptr(n)
		h.size -= n
		a.holes.insert(h)
	case at+uintptr(n) == h.end():
		nb.prev, nb.next = h, h.next
		if h.next != nil {
			h.next.prev = nb
		}
		h.next = nb
		h.size -= n
		a.holes.insert(h)
	default:
		panic("pool: bug: memory mapped inside a hole, touching neither end")
	}
	a.release(nb)
}

// makeHole turns b into a hole and merges it with neighbouring holes.
func (a *arena) makeHole(b *block) { a.coalesce(b, stateHole, &a.holes) }

// isolate cuts the range of mapped handle hd out of the free block around
// it and marks that range moving. b is the free block hd lay under when the
// candidates were listed; cutting out other handles since leaves b at or
// before hd, so the walk is short.
func (a *arena) isolate(hd *handle, b *block) *block {
	for b != nil && b.end() <= hd.ptr {
		b = b.next
	}
	if b == nil || b.state != stateFree || b.ptr > hd.ptr || b.end() < hd.end() {
		panic("pool: bug: a moving handle is not under one free block")
	}
	a.free.remove(b)
	mv := b
	if hd.ptr > b.ptr {
		mv = a.splitAt(b, int64(hd.ptr-b.ptr))
		a.free.insert(b)
	}
	if mv.end() > hd.end() {
		tail := a.splitAt(mv, hd.size)
		tail.state = stateFree
		a.free.insert(tail)
	}
	mv.state = stateMoving
	return mv
}
