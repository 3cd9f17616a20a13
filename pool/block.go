package pool

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// This file is the bottom of the pool: the memory it holds, as segments
// tiled by blocks, and the handles of physical memory mapped into them. It
// uses no other file's names.

type blockState uint8

const (
	stateFree    blockState = iota // in its arena's free set
	stateInUse                     // handed out, or held by a front-cache shard
	statePending                   // freed, waiting for events on other streams
	stateHole                      // address space with no pages mapped (expandable arenas)
	stateMoving                    // taken out of the free set while the pool maps or releases it
)

// block is a range of a segment. Blocks of a segment tile it in address
// order through prev and next.
type block struct {
	ptr        uintptr
	size       int64
	seg        *segment
	prev, next *block
	state      blockState
	key        int64                      // rounded size it was handed out for: the front-cache key
	requested  int64                      // bytes asked for while allocated
	owner      atomic.Pointer[sync.Mutex] // the lock of the shard that handed it out or caches it; nil in an arena
	gen        uint64                     // handout count; a Block carries the gen it was given
	live       uint64                     // gen while allocated, 0 otherwise: guards double frees; under owner
	events     []uintptr                  // while pending: events on other streams
	unrecorded []uintptr                  // while pending: other streams no event could be recorded on yet
	uses       []uintptr                  // streams besides its own that used it
}

func (b *block) end() uintptr { return b.ptr + uintptr(b.size) }

// bordersHole reports whether a neighbour of b is a hole.
func (b *block) bordersHole() bool {
	return b.prev != nil && b.prev.state == stateHole || b.next != nil && b.next.state == stateHole
}

// Block is an allocation handed out by a Pool. It is a small value; copies
// refer to the same allocation. The zero Block is invalid.
type Block struct {
	ptr    uintptr
	size   int64
	stream uintptr
	blk    *block
	gen    uint64
}

// Ptr returns the device address of the block.
func (b Block) Ptr() uintptr { return b.ptr }

// Size returns the bytes the caller asked for.
func (b Block) Size() int64 { return b.size }

// Stream returns the stream the block was allocated for.
func (b Block) Stream() uintptr { return b.stream }

// arenaKey names an arena: one per stream and size class.
type arenaKey struct {
	stream uintptr
	small  bool
}

// segment is one range of address space held from the source: a classic
// segment, or the whole reservation of an expandable arena. It belongs to
// the arena of key, guarded by guard: the lock of the pool (or Region) that
// holds it.
type segment struct {
	ptr   uintptr
	size  int64
	key   arenaKey
	guard *sync.Mutex
	first *block
	// mapped, for expandable segments: the handles mapped in it, by address.
	mapped []*handle
}

// fullyFree reports whether a classic segment holds no live block.
func (s *segment) fullyFree() bool {
	return s.first.state == stateFree && s.first.next == nil
}

// empty reports whether an expandable segment is one hole: nothing mapped.
func (s *segment) empty() bool {
	return s.first.state == stateHole && s.first.next == nil
}

// handle is physical memory from the source, mapped at ptr or idle (ptr 0).
type handle struct {
	id   uint64
	size int64
	ptr  uintptr
}

func (h *handle) end() uintptr { return h.ptr + uintptr(h.size) }

// mappedIn returns the handles mapped wholly inside [lo, hi).
func (s *segment) mappedIn(lo, hi uintptr) []*handle {
	i := sort.Search(len(s.mapped), func(i int) bool { return s.mapped[i].ptr >= lo })
	var out []*handle
	for ; i < len(s.mapped) && s.mapped[i].end() <= hi; i++ {
		out = append(out, s.mapped[i])
	}
	return out
}

func (s *segment) addMapping(hd *handle) {
	i := sort.Search(len(s.mapped), func(i int) bool { return s.mapped[i].ptr >= hd.ptr })
	s.mapped = slices.Insert(s.mapped, i, hd)
}

func (s *segment) removeMapping(hd *handle) {
	i := sort.Search(len(s.mapped), func(i int) bool { return s.mapped[i].ptr >= hd.ptr })
	if i == len(s.mapped) || s.mapped[i] != hd {
		panic("pool: bug: handle not mapped in its segment")
	}
	s.mapped = slices.Delete(s.mapped, i, i+1)
}

// freeSet is a set of blocks ordered by (size, ptr), for best fit.
type freeSet struct {
	blocks []*block
}

func less(a *block, size int64, ptr uintptr) bool {
	return a.size < size || (a.size == size && a.ptr < ptr)
}

// lowerBound returns the index of the first block of at least size bytes.
func (s *freeSet) lowerBound(size int64) int {
	return sort.Search(len(s.blocks), func(i int) bool { return s.blocks[i].size >= size })
}

func (s *freeSet) insert(b *block) {
	i := sort.Search(len(s.blocks), func(i int) bool { return !less(s.blocks[i], b.size, b.ptr) })
	s.blocks = append(s.blocks, nil)
	copy(s.blocks[i+1:], s.blocks[i:])
	s.blocks[i] = b
}

func (s *freeSet) remove(b *block) {
	i := sort.Search(len(s.blocks), func(i int) bool { return !less(s.blocks[i], b.size, b.ptr) })
	if i == len(s.blocks) || s.blocks[i] != b {
		panic("pool: bug: block not in its free set")
	}
	copy(s.blocks[i:], s.blocks[i+1:])
	s.blocks[len(s.blocks)-1] = nil
	s.blocks = s.blocks[:len(s.blocks)-1]
}

func (s *freeSet) len() int { return len(s.blocks) }

func (s *freeSet) largest() int64 {
	if len(s.blocks) == 0 {
		return 0
	}
	return s.blocks[len(s.blocks)-1].size
}
