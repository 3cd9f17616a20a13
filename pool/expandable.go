package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// An expandable arena is one or more reservations of address space, each a
// segment whose blocks tile it: free, in use, or holes with nothing mapped.
// Physical memory is a set of handles, each mapped whole somewhere in a
// segment or held idle. Growing maps handles into a hole next to free space,
// with one map call per handle and one access call for the whole range. The
// handles come from, in order: idle handles; when memory is short (the limit,
// or the source out of memory), handles lying wholly under free blocks of the
// same stream, unmapped there to move; and new handles from the source for
// the rest.
//
// A handle cannot be given back in part: while one live block lies in it,
// the free memory beside that block is stranded there. So a new handle is at
// most a share of the pool's budget (see handleLimit): the memory that one
// handle can strand, and the number of handles that filling the budget
// takes, are both bounded whatever the budget. Where a growth is cut into
// several handles, one ends where the request's block will end, so that
// freeing that block frees whole handles. On a large device the limit is far
// above most growths, so a growth stays three driver calls (create, map, set
// access), and a workload that repeats makes no driver call once its first
// pass is done.

// handle is physical memory from the source, mapped at ptr or idle (ptr 0).
type handle struct {
	id   uint64
	size int64
	ptr  uintptr
}

func (h *handle) end() uintptr { return h.ptr + uintptr(h.size) }

// granules counts the granules of n bytes, rounded up.
func (p *Pool) granules(n int64) int64 { return (n + p.gran - 1) / p.gran }

// growExpandable maps memory into a so that it has a free block of r bytes.
// With squeeze it moves every handle it can before it creates one, as it
// does when memory is short. Called with growMu held.
func (p *Pool) growExpandable(a *arena, r int64, squeeze bool) error {
	p.mu.Lock()
	h, at, k := p.bestHole(a, r)
	p.mu.Unlock()
	if h == nil {
		if err := p.reserveSegment(a, r); err != nil {
			return err
		}
		p.mu.Lock()
		h, at, k = p.bestHole(a, r)
		p.mu.Unlock()
		if h == nil {
			return fmt.Errorf("pool: bug: no hole for %d bytes in a new reservation", r)
		}
	}
	if step := p.opts.growthStep / p.gran; step > 1 && !a.key.small && !squeeze {
		// Round the growth up to whole steps, where the hole has room and
		// the limit allows; short of memory, take only what is lacking.
		p.mu.Lock()
		n := (k + step - 1) / step * step
		over := p.overLimit(n * p.gran)
		p.mu.Unlock()
		if n*p.gran <= h.size && !over {
			if at != h.ptr {
				at = h.end() - uintptr(n*p.gran)
			}
			k = n
		}
	}
	p.mu.Lock()
	g := p.planGrowth(a, h, at, k, squeeze || p.overLimit(k*p.gran))
	g.blockEnd = requestEnd(h, at, r)
	p.mu.Unlock()
	return p.carryOut(a, g)
}

// growth is what one growth of an arena maps, and where it takes it from.
type growth struct {
	hole     *block
	fromEnd  bool      // map at the hole's end rather than its start
	handles  []*handle // idle handles taken
	moving   []*block  // blocks whose one handle moves (state moving)
	movingH  []*handle // the handle under each moving block
	create   int64     // bytes of new handles to create, 0 for none
	maxNew   int64     // the largest new handle (handleLimit)
	byteSize int64     // bytes mapped in all
	blockEnd uintptr   // where the block of the request that needs the growth will end
}

// requestEnd returns where the block of r bytes that a growth at at in hole
// h makes room for will end: it starts at the free block before the hole,
// where the growth joins one, else at at.
func requestEnd(h *block, at uintptr, r int64) uintptr {
	start := at
	if at == h.ptr && h.prev != nil && h.prev.state == stateFree {
		start = h.prev.ptr
	}
	return start + uintptr(r)
}

// The shape of new handles. A handle is at most 1/budgetShare of the pool's
// budget (MaxReserved, else the device's memory): then one handle strands at
// most that share of the budget, and filling the budget creates at most
// budgetShare handles beyond one a growth. A handle costs about 40 us on an
// H200 (create, map, and the access call's share: docs/pool.md), so 256 of
// them cost about what PyTorch's expandable segments spend mapping a 5 GiB
// budget in 20 MiB pages. A handle is never below minHandleGranules granules
// (8 MiB on an H200): on a small budget, handles of a page or two would
// multiply the driver calls and the moves for little memory.
const (
	budgetShare       = 256
	minHandleGranules = 4
)

// handleLimit is the largest handle a growth creates now. Called with
// p.mu held.
func (p *Pool) handleLimit() int64 {
	budget := p.total
	if limit := p.limit.Load(); limit > 0 && (budget <= 0 || limit < budget) {
		budget = limit
	}
	if budget <= 0 {
		return MaxSize
	}
	return max(budget/budgetShare&^(p.gran-1), minHandleGranules*p.gran)
}

// newHandleSizes cuts the bytes a growth creates, which start off bytes
// into the mapped range, into handles of at most g.maxNew; where it cuts at
// all, one handle ends where the request's block ends (cut bytes into the
// range).
func (g *growth) newHandleSizes(off, cut int64) []int64 {
	var sizes []int64
	for left := g.create; left > 0; {
		n := min(left, g.maxNew)
		if g.create > g.maxNew && cut > off && cut < off+n {
			n = cut - off
		}
		sizes = append(sizes, n)
		off += n
		left -= n
	}
	return sizes
}

// bestHole picks where to map memory for r bytes: the hole, the address in
// it and the granule count that need the least new memory, joining free
// blocks on either side. Called with p.mu held.
func (p *Pool) bestHole(a *arena, r int64) (hole *block, at uintptr, granules int64) {
	best := int64(-1)
	consider := func(h *block, addr uintptr, k int64) {
		if best < 0 || k < best || k == best && h.size < hole.size {
			hole, at, granules, best = h, addr, k, k
		}
	}
	for _, h := range a.holes.blocks {
		var before, after int64
		if h.prev != nil && h.prev.state == stateFree {
			before = h.prev.size
		}
		if h.next != nil && h.next.state == stateFree {
			after = h.next.size
		}
		if need := r - before; need > 0 && need <= h.size {
			consider(h, h.ptr, p.granules(need))
		}
		if need := r - after; need > 0 && need <= h.size {
			k := p.granules(need)
			consider(h, h.end()-uintptr(k*p.gran), k)
		}
		if before+h.size+after >= r {
			consider(h, h.ptr, h.size/p.gran)
		}
	}
	return hole, at, granules
}

// planGrowth chooses the handles that fill k granules at at in hole h: idle
// ones, then, if move, handles moved from under free blocks, then one new
// handle for the rest. The plan maps at least k and at most the hole's
// granules. Called with p.mu held; it takes the idle handles and marks the
// moving blocks, so the plan is the caller's to carry out or undo.
func (p *Pool) planGrowth(a *arena, h *block, at uintptr, k int64, move bool) *growth {
	g := &growth{hole: h, fromEnd: at != h.ptr}
	limit := h.size / p.gran
	var total int64 // granules planned
	// Idle handles first: mapping one costs no unmap.
	for total < k {
		i := pickHandle(p.idle, p.gran, k-total, limit-total)
		if i < 0 {
			break
		}
		hd := p.idle[i]
		p.idle = slices.Delete(p.idle, i, i+1)
		g.handles = append(g.handles, hd)
		total += hd.size / p.gran
	}
	if total < k && move {
		cands, under := p.movable(a.key.stream, h.prev, h.next)
		for total < k {
			i := pickHandle(cands, p.gran, k-total, limit-total)
			if i < 0 {
				break
			}
			g.moving = append(g.moving, p.isolate(cands[i], under[i]))
			g.movingH = append(g.movingH, cands[i])
			total += cands[i].size / p.gran
			cands, under = slices.Delete(cands, i, i+1), slices.Delete(under, i, i+1)
		}
	}
	if total < k {
		g.create = (k - total) * p.gran
		g.maxNew = p.handleLimit()
		total = k
	}
	g.byteSize = total * p.gran
	return g
}

// pickHandle returns the index in hs of the handle to take for need
// granules, at most limit: the smallest that covers need alone, else the
// largest that fits under limit; -1 if none fits.
func pickHandle(hs []*handle, gran, need, limit int64) int {
	cover, largest := -1, -1
	for i, h := range hs {
		n := h.size / gran
		if n > limit {
			continue
		}
		if n >= need && (cover < 0 || n < hs[cover].size/gran) {
			cover = i
		}
		if largest < 0 || n > hs[largest].size/gran {
			largest = i
		}
	}
	if cover >= 0 {
		return cover
	}
	return largest
}

// movable lists the handles lying wholly under free blocks of stream's
// expandable arenas, except skip1 and skip2, which the caller means to join,
// and for each the free block it lies under. Called with p.mu held.
func (p *Pool) movable(stream uintptr, skip1, skip2 *block) (hs []*handle, under []*block) {
	for _, small := range []bool{false, true} {
		a := p.arenas[arenaKey{stream, small}]
		if a == nil || !a.expandable {
			continue
		}
		for _, b := range a.free.blocks {
			if b == skip1 || b == skip2 {
				continue
			}
			for _, hd := range b.seg.mappedIn(b.ptr, b.end()) {
				hs = append(hs, hd)
				under = append(under, b)
			}
		}
	}
	return hs, under
}

// isolate cuts the range of mapped handle hd out of the free block around
// it and marks that range moving. b is the free block hd lay under when the
// candidates were listed; cutting out other handles since leaves b at or
// before hd, so the walk is short. Called with p.mu held.
func (p *Pool) isolate(hd *handle, b *block) *block {
	for b != nil && b.end() <= hd.ptr {
		b = b.next
	}
	if b == nil || b.state != stateFree || b.ptr > hd.ptr || b.end() < hd.end() {
		panic("pool: bug: a moving handle is not under one free block")
	}
	a := b.seg.arena
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

// carryOut makes the driver calls of a growth plan and records the result.
// On failure nothing is lost: handles it could not map are kept idle, and
// moving blocks it could not unmap are free again. Called with growMu held
// and p.mu not held.
func (p *Pool) carryOut(a *arena, g *growth) error {
	handles := g.handles
	fail := func(err error) error {
		p.mu.Lock()
		p.idle = append(p.idle, handles...)
		p.mu.Unlock()
		return err
	}
	if len(g.moving) > 0 {
		if _, err := p.waitStreams(context.Background(), []uintptr{a.key.stream}); err != nil {
			p.mu.Lock()
			for _, mv := range g.moving {
				mv.seg.arena.release(mv)
			}
			p.mu.Unlock()
			return fail(err)
		}
		moved, err := p.unmapMoving(g.moving, g.movingH)
		handles = append(handles, moved...)
		p.mu.Lock()
		for _, hd := range moved {
			p.pagesMoved += hd.size / p.gran
		}
		p.mu.Unlock()
		if err != nil {
			return fail(err)
		}
	}
	start := g.hole.ptr
	if g.fromEnd {
		start = g.hole.end() - uintptr(g.byteSize)
	}
	cut := int64(0)
	if g.blockEnd > start {
		cut = p.granules(int64(g.blockEnd-start)) * p.gran
	}
	for _, n := range g.newHandleSizes(g.byteSize-g.create, cut) {
		hd, err := p.createHandle(n)
		if err != nil {
			return fail(err)
		}
		handles = append(handles, hd)
	}
	at := start
	for i, hd := range handles {
		if err := p.mapper.Map(at, hd.size, hd.id); err != nil {
			p.unmapAll(handles[:i])
			return fail(classify(fmt.Errorf("pool: mapping %s: %w", FormatBytes(hd.size), err)))
		}
		hd.ptr = at
		at += uintptr(hd.size)
	}
	if err := p.mapper.SetAccess(start, g.byteSize); err != nil {
		p.unmapAll(handles)
		return fail(classify(fmt.Errorf("pool: setting access to %s: %w", FormatBytes(g.byteSize), err)))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fillHole(a, g.hole, start, g.byteSize)
	for _, hd := range handles {
		g.hole.seg.addMapping(hd)
	}
	p.growths++
	p.pagesMapped += g.byteSize / p.gran
	return nil
}

// unmapAll undoes the mappings of handles (after a failed growth) and
// leaves them idle. A mapping the source will not undo is kept counted
// as reserved and never used again. Called with p.mu not held.
func (p *Pool) unmapAll(handles []*handle) {
	for _, hd := range handles {
		if err := p.mapper.Unmap(hd.ptr, hd.size); err == nil {
			hd.ptr = 0
		}
	}
}

// createHandle creates a handle of size bytes, within the limit.
func (p *Pool) createHandle(size int64) (*handle, error) {
	if err := p.checkLimit(size); err != nil {
		return nil, err
	}
	id, err := p.mapper.Create(size)
	if err != nil {
		return nil, classify(fmt.Errorf("pool: creating %s: %w", FormatBytes(size), err))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sourceAllocs++
	p.handles++
	p.addReserved(size)
	return &handle{id: id, size: size}, nil
}

// reserveSegment adds a reservation of address space to a.
func (p *Pool) reserveSegment(a *arena, r int64) error {
	size := max(p.vaSize, p.granules(r)*p.gran)
	ptr, err := p.mapper.ReserveAddress(size)
	if err != nil {
		// Without address space the request cannot be served: to the
		// caller that is running out of memory, and the cache is released
		// and the reservation tried again as for any other.
		return sourceOOM{fmt.Errorf("pool: reserving %s of address space: %w", FormatBytes(size), err)}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &segment{ptr: ptr, size: size, arena: a}
	s.first = &block{ptr: ptr, size: size, seg: s, state: stateHole}
	a.segments = append(a.segments, s)
	a.holes.insert(s.first)
	return nil
}

// fillHole turns n bytes of hole h at at, now mapped, into a free block.
// Called with p.mu held.
func (p *Pool) fillHole(a *arena, h *block, at uintptr, n int64) {
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

// unmapMoving unmaps the handle under each moving block, turns the block
// into a hole and returns the handles unmapped. A block the source would not
// unmap goes back to its free set. Called with growMu held and p.mu not held.
func (p *Pool) unmapMoving(moving []*block, hs []*handle) ([]*handle, error) {
	var errs []error
	var done []*handle
	for i, mv := range moving {
		hd := hs[i]
		err := p.mapper.Unmap(hd.ptr, hd.size)
		p.mu.Lock()
		if err != nil {
			mv.seg.arena.release(mv)
			errs = append(errs, fmt.Errorf("pool: unmapping %s: %w", FormatBytes(hd.size), err))
		} else {
			mv.seg.removeMapping(hd)
			hd.ptr = 0
			makeHole(mv.seg.arena, mv)
			done = append(done, hd)
		}
		p.mu.Unlock()
	}
	return done, errors.Join(errs...)
}

// makeHole turns b into a hole and merges it with neighbouring holes.
func makeHole(a *arena, b *block) { a.coalesce(b, stateHole, &a.holes) }

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
