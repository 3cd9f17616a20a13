package pool

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

// roundSize rounds a request up to a multiple of minBlock.
func roundSize(n int64) int64 {
	if n < minBlock {
		return minBlock
	}
	return (n + minBlock - 1) &^ (minBlock - 1)
}

// segment is one range of address space held from the source: a classic
// segment, or the whole reservation of an expandable arena.
type segment struct {
	ptr   uintptr
	size  int64
	arena *arena
	first *block
	// mapped, for expandable segments: the handles mapped in it, by address.
	mapped []*handle
}

// arenaKey names an arena: one per stream and size class.
type arenaKey struct {
	stream uintptr
	small  bool
}

// arena does best-fit allocation over its segments. Its methods are called
// with the owner's lock held.
type arena struct {
	key        arenaKey
	pool       *Pool // nil for a Region
	expandable bool
	maxSplit   int64
	free       freeSet // free blocks
	holes      freeSet // unmapped ranges of an expandable segment
	segments   []*segment
	spare      []*block // block objects merged away, for reuse
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
	if !a.key.small && !a.expandable && a.maxSplit < 1<<62 {
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

// bordersHole reports whether a neighbour of b is a hole.
func (b *block) bordersHole() bool {
	return b.prev != nil && b.prev.state == stateHole || b.next != nil && b.next.state == stateHole
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
	if n := len(a.spare); n > 0 {
		b := a.spare[n-1]
		a.spare[n-1] = nil
		a.spare = a.spare[:n-1]
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
	b.shard.Store(nil)
	b.events, b.uses = b.events[:0], b.uses[:0]
	a.spare = append(a.spare, b)
}

// addSegment adds a classic segment, all of it free, and returns it.
func (a *arena) addSegment(ptr uintptr, size int64) *segment {
	s := &segment{ptr: ptr, size: size, arena: a}
	s.first = &block{ptr: ptr, size: size, seg: s, state: stateFree}
	a.segments = append(a.segments, s)
	a.free.insert(s.first)
	return s
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

// fullyFree reports whether a classic segment holds no live block.
func (s *segment) fullyFree() bool {
	return s.first.state == stateFree && s.first.next == nil
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
