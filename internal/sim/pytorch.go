package sim

import (
	"fmt"
	"slices"
	"sort"
)

// TorchExpandable models PyTorch's CUDA caching allocator with
// expandable_segments:True, as PyTorch 2.x (c10/cuda/CUDACachingAllocator.cpp)
// allocates, so that a replay on this machine tells what cap PyTorch would
// need, before a GPU run measures it. What it models:
//   - sizes rounded to 512 bytes; requests up to 1 MiB in a small pool of 2 MiB
//     pages, larger ones in a large pool of 20 MiB pages, one segment of
//     address space per stream and pool;
//   - best fit among the free mapped blocks (preferring, among fits, one
//     whose unmapped neighbour does not make it look larger), splitting off
//     any rest of 512 bytes or more, and merging a freed block with free
//     mapped neighbours;
//   - where nothing fits, the cap check of alloc_block: the bytes mapped
//     now plus the request's allocation size (2 MiB for a small one, 20
//     MiB below 10 MiB, else the size rounded up to 2 MiB) must not pass the
//     cap; then the lowest unmapped range, joined with the free block before
//     it, whose run of free and unmapped blocks holds the request, has the
//     pages it lacks mapped;
//   - on failure, every page lying wholly inside a free block is unmapped
//     (release_cached_blocks), and the allocation is tried once more.
//
// It does not model events, graphs, max_split_size or
// garbage_collection_threshold, which the comparisons leave unset.
type TorchExpandable struct {
	cap    int64 // 0: none
	mapped int64
	peak   int64
	pools  map[torchKey]*torchPool
	live   map[uint64]*torchBlock
}

type torchKey struct {
	stream uint64
	small  bool
}

type torchPool struct {
	page  int64
	free  []*torchBlock // mapped free blocks, by (size, ptr)
	holes []*torchBlock // unmapped blocks, by ptr
}

type torchBlock struct {
	ptr, size  int64
	mapped     bool
	allocated  bool
	prev, next *torchBlock
	pool       *torchPool
}

// PyTorch's sizes (CUDACachingAllocator.cpp).
const (
	torchMinBlock   = 512
	torchSmallSize  = 1 << 20  // kSmallSize
	torchSmallPage  = 2 << 20  // kSmallBuffer
	torchLargePage  = 20 << 20 // kLargeBuffer
	torchMinLarge   = 10 << 20 // kMinLargeAlloc
	torchRoundLarge = 2 << 20  // kRoundLarge
	torchAddress    = 1 << 46  // a segment's address space: more than any trace here maps
)

// NewTorchExpandable returns the model under a cap of capBytes (0: none).
func NewTorchExpandable(capBytes int64) *TorchExpandable {
	return &TorchExpandable{cap: capBytes, pools: map[torchKey]*torchPool{}, live: map[uint64]*torchBlock{}}
}

// PeakMapped returns the most bytes the model had mapped at once: PyTorch's
// peak reserved.
func (t *TorchExpandable) PeakMapped() int64 { return t.peak }

// Mapped returns the bytes mapped now: PyTorch's reserved.
func (t *TorchExpandable) Mapped() int64 { return t.mapped }

func torchRound(n int64) int64 {
	if n < torchMinBlock {
		return torchMinBlock
	}
	return (n + torchMinBlock - 1) / torchMinBlock * torchMinBlock
}

func torchAllocSize(n int64) int64 {
	switch {
	case n <= torchSmallSize:
		return torchSmallPage
	case n < torchMinLarge:
		return torchLargePage
	default:
		return (n + torchRoundLarge - 1) / torchRoundLarge * torchRoundLarge
	}
}

func (t *TorchExpandable) pool(k torchKey) *torchPool {
	p := t.pools[k]
	if p == nil {
		p = &torchPool{page: torchLargePage}
		if k.small {
			p.page = torchSmallPage
		}
		h := &torchBlock{ptr: 0, size: torchAddress}
		p.holes = append(p.holes, h)
		t.pools[k] = p
	}
	return p
}

func (p *torchPool) freeIndex(b *torchBlock) int {
	return sort.Search(len(p.free), func(i int) bool {
		c := p.free[i]
		return c.size > b.size || c.size == b.size && c.ptr >= b.ptr
	})
}

func (p *torchPool) addFree(b *torchBlock) {
	i := p.freeIndex(b)
	p.free = slices.Insert(p.free, i, b)
}

func (p *torchPool) removeFree(b *torchBlock) {
	i := p.freeIndex(b)
	if i == len(p.free) || p.free[i] != b {
		panic("sim: torch model: free block not in its set")
	}
	p.free = slices.Delete(p.free, i, i+1)
}

func (p *torchPool) addHole(b *torchBlock) {
	i := sort.Search(len(p.holes), func(i int) bool { return p.holes[i].ptr >= b.ptr })
	p.holes = slices.Insert(p.holes, i, b)
}

func (p *torchPool) removeHole(b *torchBlock) {
	i := sort.Search(len(p.holes), func(i int) bool { return p.holes[i].ptr >= b.ptr })
	if i == len(p.holes) || p.holes[i] != b {
		panic("sim: torch model: hole not in its set")
	}
	p.holes = slices.Delete(p.holes, i, i+1)
}

// Alloc allocates size bytes on stream for the trace's address addr, and
// reports whether it fit.
func (t *TorchExpandable) Alloc(addr uint64, size int64, stream uint64) (bool, error) {
	if _, dup := t.live[addr]; dup {
		return false, fmt.Errorf("sim: torch model: address %d allocated twice", addr)
	}
	if size <= 0 {
		return false, fmt.Errorf("sim: torch model: Alloc(%d)", size)
	}
	r := torchRound(size)
	p := t.pool(torchKey{stream, r <= torchSmallSize})
	b := p.bestFit(r)
	if b == nil {
		b = t.grow(p, r)
	}
	if b == nil {
		t.releaseCached()
		b = t.grow(p, r)
	}
	if b == nil {
		return false, nil
	}
	p.removeFree(b)
	if b.size-r >= torchMinBlock {
		p.addFree(split(b, r))
	}
	b.allocated = true
	b.pool = p
	t.live[addr] = b
	return true, nil
}

// expandableSize is what get_free_block takes a free block's size to be:
// with the unmapped block after it.
func expandableSize(b *torchBlock) int64 {
	if b.next != nil && !b.next.mapped {
		return b.size + b.next.size
	}
	return b.size
}

// bestFit is get_free_block: the smallest free block of at least r bytes,
// then the next larger while their expandable size is smaller.
// split cuts b at n bytes and returns the rest, linked after b and mapped
// as b is.
func split(b *torchBlock, n int64) *torchBlock {
	rest := &torchBlock{ptr: b.ptr + n, size: b.size - n, mapped: b.mapped, prev: b, next: b.next}
	if b.next != nil {
		b.next.prev = rest
	}
	b.next = rest
	b.size = n
	return rest
}

func (p *torchPool) bestFit(r int64) *torchBlock {
	i := sort.Search(len(p.free), func(i int) bool { return p.free[i].size >= r })
	if i == len(p.free) {
		return nil
	}
	for i+1 < len(p.free) && expandableSize(p.free[i+1]) < expandableSize(p.free[i]) {
		i++
	}
	return p.free[i]
}

// grow is alloc_block: the cap check, then the mapping of the pages a free
// run lacks. It returns the free block that now holds r bytes, or nil.
func (t *TorchExpandable) grow(p *torchPool, r int64) *torchBlock {
	if t.cap > 0 && t.mapped+torchAllocSize(r) > t.cap {
		return nil
	}
	var c *torchBlock
	for _, h := range p.holes {
		c = h
		if h.prev != nil && !h.prev.allocated {
			c = h.prev
		}
		var n int64
		for b := c; b != nil && !b.allocated && n < r; b = b.next {
			n += b.size
		}
		if n >= r {
			break
		}
		c = nil
	}
	if c == nil {
		panic("sim: torch model: no address space")
	}
	if !c.mapped {
		c = t.mapBlock(p, c, min(c.size, r))
	}
	for c.size < r {
		c = t.mapBlock(p, c.next, min(r-c.size, c.next.size))
	}
	return c
}

// mapBlock maps the pages of the first n bytes of unmapped block b and
// returns the free block they join.
func (t *TorchExpandable) mapBlock(p *torchPool, b *torchBlock, n int64) *torchBlock {
	if b.mapped {
		panic("sim: torch model: mapping a mapped block")
	}
	n = (n + p.page - 1) / p.page * p.page
	p.removeHole(b)
	if n < b.size {
		p.addHole(split(b, n))
	}
	b.mapped = true
	t.mapped += n
	t.peak = max(t.peak, t.mapped)
	return p.merge(b)
}

// merge joins free mapped block b with free mapped neighbours, puts the
// result in the free set and returns it.
func (p *torchPool) merge(b *torchBlock) *torchBlock {
	if q := b.prev; q != nil && q.mapped && !q.allocated {
		p.removeFree(q)
		q.size += b.size
		q.next = b.next
		if b.next != nil {
			b.next.prev = q
		}
		b = q
	}
	if q := b.next; q != nil && q.mapped && !q.allocated {
		p.removeFree(q)
		b.size += q.size
		b.next = q.next
		if q.next != nil {
			q.next.prev = b
		}
	}
	p.addFree(b)
	return b
}

// Free frees the block of the trace's address addr; an address never
// allocated is skipped, as the replays skip it.
func (t *TorchExpandable) Free(addr uint64) {
	b, ok := t.live[addr]
	if !ok {
		return
	}
	delete(t.live, addr)
	b.allocated = false
	b.pool.merge(b)
}

// releaseCached is release_cached_blocks: every page lying wholly inside a
// free block, in every pool, is unmapped.
func (t *TorchExpandable) releaseCached() {
	for _, p := range t.pools {
		for _, b := range slices.Clone(p.free) {
			t.unmapBlock(p, b)
		}
	}
}

// unmapBlock unmaps the whole pages inside free block b.
func (t *TorchExpandable) unmapBlock(p *torchPool, b *torchBlock) {
	lo := (b.ptr + p.page - 1) / p.page * p.page
	hi := (b.ptr + b.size) / p.page * p.page
	if lo >= hi {
		return
	}
	p.removeFree(b)
	if lo > b.ptr {
		before := &torchBlock{ptr: b.ptr, size: lo - b.ptr, mapped: true, prev: b.prev, next: b}
		if b.prev != nil {
			b.prev.next = before
		}
		b.prev = before
		b.ptr, b.size = lo, b.size-(lo-b.ptr)
		p.addFree(before)
	}
	if hi < b.ptr+b.size {
		after := &torchBlock{ptr: hi, size: b.ptr + b.size - hi, mapped: true, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = after
		}
		b.next = after
		b.size = hi - b.ptr
		p.addFree(after)
	}
	b.mapped = false
	t.mapped -= b.size
	if q := b.prev; q != nil && !q.mapped {
		p.removeHole(q)
		q.size += b.size
		q.next = b.next
		if b.next != nil {
			b.next.prev = q
		}
		b = q
	}
	if q := b.next; q != nil && !q.mapped {
		p.removeHole(q)
		b.size += q.size
		b.next = q.next
		if q.next != nil {
			q.next.prev = b
		}
	}
	p.addHole(b)
}
