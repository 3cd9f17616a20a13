package pool

import (
	"errors"
	"fmt"
	"sort"
)

// An expandable arena is one or more reservations of address space, each a
// segment whose blocks tile it: free, in use, or holes with no pages mapped.
// Growing maps pages into a hole next to free space. The pages come from, in
// order: pages the pool holds unmapped, whole pages under free blocks of the
// same stream (unmapped there: the page moves), and new pages from the source.
// So reserved memory grows only when the free memory, counted in whole
// pages, cannot hold the request.

func (p *Pool) pageIndex(ptr uintptr) int64 { return int64(ptr) / p.pageSize }

// growExpandable maps pages into a so that it has a free block of r bytes.
// Called with growMu held.
func (p *Pool) growExpandable(a *arena, r int64) error {
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
	pages, err := p.obtainPages(k, a.key.stream, h.prev, h.next)
	if err != nil {
		return err
	}
	if err := p.mapper.MapPages(at, pages); err != nil {
		p.mu.Lock()
		p.freePages = append(p.freePages, pages...)
		p.mu.Unlock()
		return classify(fmt.Errorf("pool: mapping %d pages: %w", k, err))
	}
	p.mu.Lock()
	p.fillHole(a, h, at, pages)
	p.pagesMapped += int64(len(pages))
	p.mu.Unlock()
	return nil
}

// reserveSegment adds a reservation of address space to a.
func (p *Pool) reserveSegment(a *arena, r int64) error {
	size := max(p.vaSize, (r+p.pageSize-1)&^(p.pageSize-1))
	ptr, err := p.mapper.ReserveAddress(size)
	if err != nil {
		return fmt.Errorf("pool: reserving %d bytes of address space: %w", size, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &segment{ptr: ptr, size: size, arena: a, pages: make(map[int64]uint64)}
	s.first = &block{ptr: ptr, size: size, seg: s, state: stateHole}
	a.segments = append(a.segments, s)
	a.holes.insert(s.first)
	return nil
}

// bestHole picks where to map pages for r bytes: the hole, the address in it
// and the page count that need the fewest new pages, joining free blocks on
// either side. Called with p.mu held.
func (p *Pool) bestHole(a *arena, r int64) (hole *block, at uintptr, pages int64) {
	P := p.pageSize
	ceil := func(n int64) int64 { return (n + P - 1) / P }
	best := int64(-1)
	consider := func(h *block, addr uintptr, k int64) {
		if best < 0 || k < best || k == best && h.size < hole.size {
			hole, at, pages, best = h, addr, k, k
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
			consider(h, h.ptr, ceil(need))
		}
		if need := r - after; need > 0 && need <= h.size {
			k := ceil(need)
			consider(h, h.end()-uintptr(k*P), k)
		}
		if before+h.size+after >= r {
			consider(h, h.ptr, h.size/P)
		}
	}
	return hole, at, pages
}

// fillHole turns the part of hole h at at, len(pages) pages long, into a free
// block with those pages mapped. Called with p.mu held.
func (p *Pool) fillHole(a *arena, h *block, at uintptr, pages []uint64) {
	n := int64(len(pages)) * p.pageSize
	a.holes.remove(h)
	nb := &block{ptr: at, size: n, seg: h.seg, state: stateInUse}
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
		panic("pool: bug: pages mapped inside a hole, touching neither end")
	}
	first := p.pageIndex(at)
	for i, pg := range pages {
		h.seg.pages[first+int64(i)] = pg
	}
	a.release(nb)
}

// obtainPages returns k pages to map: held ones first, then pages moved from
// free blocks of stream's arenas (never skip1 or skip2, which the caller
// means to join), then new pages. Called with growMu held.
func (p *Pool) obtainPages(k int64, stream uintptr, skip1, skip2 *block) ([]uint64, error) {
	p.mu.Lock()
	n := min(k, int64(len(p.freePages)))
	pages := append([]uint64(nil), p.freePages[int64(len(p.freePages))-n:]...)
	p.freePages = p.freePages[:int64(len(p.freePages))-n]
	var moving []*block
	if need := k - n; need > 0 {
		moving = p.planMoves(stream, need, skip1, skip2)
	}
	p.mu.Unlock()
	if len(moving) > 0 {
		if err := p.waitStreams([]uintptr{stream}); err != nil {
			p.mu.Lock()
			for _, mv := range moving {
				mv.seg.arena.release(mv)
			}
			p.freePages = append(p.freePages, pages...)
			p.mu.Unlock()
			return nil, err
		}
		if err := p.unmapMoving(moving); err != nil {
			p.mu.Lock()
			p.freePages = append(p.freePages, pages...)
			p.mu.Unlock()
			return nil, err
		}
		p.mu.Lock()
		take := min(k-int64(len(pages)), int64(len(p.freePages)))
		pages = append(pages, p.freePages[int64(len(p.freePages))-take:]...)
		p.freePages = p.freePages[:int64(len(p.freePages))-take]
		p.mu.Unlock()
	}
	need := k - int64(len(pages))
	if need == 0 {
		return pages, nil
	}
	p.mu.Lock()
	over := p.overLimit(need * p.pageSize)
	p.mu.Unlock()
	var err error
	created := 0
	if over {
		err = sourceOOM{}
	} else {
		for range need {
			pg, cerr := p.mapper.CreatePage()
			if cerr != nil {
				err = classify(fmt.Errorf("pool: creating a page: %w", cerr))
				break
			}
			pages = append(pages, pg)
			created++
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sourceAllocs += int64(created)
	p.addReserved(int64(created) * p.pageSize)
	if err != nil {
		p.freePages = append(p.freePages, pages...)
		return nil, err
	}
	return pages, nil
}

// planMoves takes whole pages, need of them at most, out of free blocks of
// stream's expandable arenas, most pages first, and returns the blocks now
// moving. Called with p.mu held.
func (p *Pool) planMoves(stream uintptr, need int64, skip1, skip2 *block) []*block {
	var cands []*block
	for _, small := range []bool{false, true} {
		a := p.arenas[arenaKey{stream, small}]
		if a == nil || !a.expandable {
			continue
		}
		for _, b := range a.free.blocks {
			if b != skip1 && b != skip2 && p.wholePages(b) > 0 {
				cands = append(cands, b)
			}
		}
	}
	sort.Slice(cands, func(i, j int) bool { return p.wholePages(cands[i]) > p.wholePages(cands[j]) })
	var moving []*block
	for _, b := range cands {
		if need <= 0 {
			break
		}
		m := min(need, p.wholePages(b))
		moving = append(moving, p.isolatePages(b.seg.arena, b, m))
		need -= m
	}
	return moving
}

// wholePages counts the pages that lie wholly inside b.
func (p *Pool) wholePages(b *block) int64 {
	lo := (int64(b.ptr) + p.pageSize - 1) / p.pageSize
	hi := int64(b.end()) / p.pageSize
	return max(0, hi-lo)
}

// isolatePages splits free block b so that its last m whole pages (all, if
// fewer) form a block of their own, marked moving; the rest stays free. It
// returns nil where b has no whole page. Called with p.mu held.
func (p *Pool) isolatePages(a *arena, b *block, m int64) *block {
	whole := p.wholePages(b)
	if whole == 0 {
		return nil
	}
	m = min(m, whole)
	hi := uintptr(int64(b.end()) / p.pageSize * p.pageSize)
	lo := hi - uintptr(m*p.pageSize)
	a.free.remove(b)
	mv := b
	if lo > b.ptr {
		mv = splitAt(b, int64(lo-b.ptr))
		b.state = stateFree
		a.free.insert(b)
	}
	if mv.end() > hi {
		tail := splitAt(mv, int64(hi-mv.ptr))
		tail.state = stateFree
		a.free.insert(tail)
	}
	mv.state = stateMoving
	return mv
}

// splitAt cuts b at offset off and returns the new block after it.
func splitAt(b *block, off int64) *block {
	nb := &block{ptr: b.ptr + uintptr(off), size: b.size - off, seg: b.seg, prev: b, next: b.next}
	if b.next != nil {
		b.next.prev = nb
	}
	b.next = nb
	b.size = off
	return nb
}

// unmapMoving unmaps moving blocks, turns them into holes and keeps their
// pages in p.freePages. A block the source would not unmap goes back to its
// free set. Called with growMu held and p.mu not held.
func (p *Pool) unmapMoving(moving []*block) error {
	var errs []error
	for _, mv := range moving {
		err := p.mapper.UnmapPages(mv.ptr, mv.size)
		p.mu.Lock()
		if err != nil {
			mv.seg.arena.release(mv)
			errs = append(errs, fmt.Errorf("pool: unmapping %d bytes: %w", mv.size, err))
		} else {
			first := p.pageIndex(mv.ptr)
			for i := range mv.size / p.pageSize {
				p.freePages = append(p.freePages, mv.seg.pages[first+i])
				delete(mv.seg.pages, first+i)
			}
			p.pagesMoved += mv.size / p.pageSize
			makeHole(mv.seg.arena, mv)
		}
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}

// makeHole turns b into a hole and merges it with neighbouring holes.
func makeHole(a *arena, b *block) { coalesce(b, stateHole, &a.holes) }
