package pool

import (
	"sort"
	"sync/atomic"
)

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
	key        int64                 // rounded size it was handed out for: the front-cache key
	requested  int64                 // bytes asked for while allocated
	shard      atomic.Pointer[shard] // the shard that handed it out or caches it; nil in an arena
	gen        uint64                // handout count; a Block carries the gen it was given
	live       uint64                // gen while allocated, 0 otherwise: guards double frees; under shard's mu
	events     []uintptr             // while pending: events on other streams
	unrecorded []uintptr             // while pending: other streams no event could be recorded on yet
	uses       []uintptr             // streams besides its own that used it
}

func (b *block) end() uintptr { return b.ptr + uintptr(b.size) }

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

// IsZero reports whether b is the zero Block.
func (b Block) IsZero() bool { return b.blk == nil }

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
