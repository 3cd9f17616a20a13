package pool

import (
	"fmt"
	"sort"
)

// checkInvariants verifies the pool's bookkeeping. It must be called while
// no other goroutine uses the pool. It checks that blocks tile their
// segments, no two live blocks overlap, free neighbours are coalesced, the
// free and hole sets hold exactly the free blocks and holes, the pages of
// every block that is not a hole are mapped, and the counters equal the
// sums over live blocks. mapped, when not nil, says whether the source has
// [ptr, ptr+n) accessible.
func (p *Pool) checkInvariants(mapped func(ptr uintptr, n int64) bool) error {
	p.growMu.Lock()
	defer p.growMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	cached := map[*block]bool{}
	for i := range p.front.shards {
		s := &p.front.shards[i]
		s.mu.Lock()
		var bytes int64
		var bad error
		s.bins.each(func(bn *bin) {
			k := bn.key
			if s.bins.find(k) != bn {
				bad = fmt.Errorf("bin %+v cannot be found", k)
			}
			for _, b := range bn.blocks {
				if cached[b] {
					bad = fmt.Errorf("block %#x cached twice", b.ptr)
				}
				if b.key != k.size || b.seg.key.stream != k.stream || b.size < k.size {
					bad = fmt.Errorf("block %#x (%d bytes) in bin %+v", b.ptr, b.size, k)
				}
				if b.owner.Load() != &s.mu {
					bad = fmt.Errorf("block %#x cached by a shard that does not own it", b.ptr)
				}
				cached[b] = true
				bytes += b.size
			}
		})
		if bad != nil {
			s.mu.Unlock()
			return bad
		}
		if bytes != s.bytes {
			s.mu.Unlock()
			return fmt.Errorf("shard %d counts %d bytes, holds %d", i, s.bytes, bytes)
		}
		s.mu.Unlock()
	}
	pending := map[*block]bool{}
	for _, b := range p.streams.pending {
		pending[b] = true
	}
	var allocated, requested, live, reserved, handles int64
	type span struct{ lo, hi uintptr }
	var spans []span
	for key, a := range p.arenas.byKey {
		if a.key != key {
			return fmt.Errorf("arena %+v filed under %+v", a.key, key)
		}
		nfree, nholes := 0, 0
		for _, s := range a.segments {
			if s.key != a.key || s.guard != a.guard {
				return fmt.Errorf("segment %#x points to another arena", s.ptr)
			}
			spans = append(spans, span{s.ptr, s.ptr + uintptr(s.size)})
			if !a.expandable {
				reserved += s.size
			}
			at := s.ptr
			var prev *block
			for b := s.first; b != nil; b = b.next {
				if b.prev != prev || b.seg != s || b.ptr != at || b.size <= 0 {
					return fmt.Errorf("segment %#x: block %#x (%d bytes) breaks the tiling at %#x", s.ptr, b.ptr, b.size, at)
				}
				if prev != nil && prev.state == b.state && (b.state == stateFree || b.state == stateHole) {
					return fmt.Errorf("segment %#x: neighbours %#x and %#x both %v, not coalesced", s.ptr, prev.ptr, b.ptr, b.state)
				}
				switch b.state {
				case stateFree:
					nfree++
					if !a.free.has(b) || b.owner.Load() != nil {
						return fmt.Errorf("free block %#x missing from the free set, or owned by a shard", b.ptr)
					}
				case stateHole:
					nholes++
					if !a.holes.has(b) || int64(b.ptr)%p.pages.gran != 0 || b.size%p.pages.gran != 0 {
						return fmt.Errorf("hole %#x (%d bytes) unaligned or missing from the hole set", b.ptr, b.size)
					}
				case statePending:
					if !pending[b] {
						return fmt.Errorf("pending block %#x not in the pending list", b.ptr)
					}
				case stateInUse:
					if cached[b] {
						if b.live != 0 {
							return fmt.Errorf("cached block %#x is marked live", b.ptr)
						}
						delete(cached, b)
					} else {
						if b.live != b.gen || b.gen == 0 || b.owner.Load() == nil {
							return fmt.Errorf("block %#x in use but not live", b.ptr)
						}
						live++
						allocated += b.size
						requested += b.requested
						if b.requested > b.size || b.size%minBlock != 0 {
							return fmt.Errorf("block %#x of %d bytes serves %d", b.ptr, b.size, b.requested)
						}
					}
				default:
					return fmt.Errorf("block %#x in state %v outside any operation", b.ptr, b.state)
				}
				if a.expandable {
					// Mappings tile the blocks that are not holes, and
					// none lies under a hole.
					if b.state == stateHole && len(s.mappedIn(b.ptr, b.end())) > 0 {
						return fmt.Errorf("hole %#x has memory mapped in it", b.ptr)
					}
					if b.state != stateHole && !coversRange(s, b.ptr, b.end()) {
						return fmt.Errorf("block %#x (%d bytes) lies on unmapped memory", b.ptr, b.size)
					}
				}
				if mapped != nil && b.state != stateHole && !mapped(b.ptr, b.size) {
					return fmt.Errorf("block %#x (%d bytes) is not accessible at the source", b.ptr, b.size)
				}
				at = b.end()
				prev = b
			}
			if at != s.ptr+uintptr(s.size) {
				return fmt.Errorf("segment %#x: blocks end at %#x, not at its end", s.ptr, at)
			}
			for i, hd := range s.mapped {
				if hd.ptr < s.ptr || hd.end() > s.ptr+uintptr(s.size) || int64(hd.ptr)%p.pages.gran != 0 || hd.size%p.pages.gran != 0 {
					return fmt.Errorf("segment %#x: mapping %#x (%d bytes) out of it or unaligned", s.ptr, hd.ptr, hd.size)
				}
				if i > 0 && s.mapped[i-1].end() > hd.ptr {
					return fmt.Errorf("segment %#x: mappings at %#x and %#x overlap or are out of order", s.ptr, s.mapped[i-1].ptr, hd.ptr)
				}
				reserved += hd.size
				handles++
			}
		}
		if nfree != a.free.len() || nholes != a.holes.len() {
			return fmt.Errorf("arena %+v: %d free blocks and %d holes, sets hold %d and %d", key, nfree, nholes, a.free.len(), a.holes.len())
		}
	}
	if len(cached) != 0 {
		return fmt.Errorf("%d cached blocks lie in no segment", len(cached))
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			return fmt.Errorf("segments at %#x and %#x overlap", spans[i-1].lo, spans[i].lo)
		}
	}
	for _, hd := range p.idleHandles() {
		if hd.ptr != 0 {
			return fmt.Errorf("idle handle %d is mapped at %#x", hd.id, hd.ptr)
		}
		reserved += hd.size
		handles++
	}
	if p.pages != nil {
		for _, hd := range p.pages.stuck {
			if hd.ptr == 0 {
				return fmt.Errorf("stuck handle %d is mapped nowhere", hd.id)
			}
			reserved += hd.size
			handles++
		}
	}
	if handles != p.ledger.handles {
		return fmt.Errorf("the pool counts %d handles, holds %d", p.ledger.handles, handles)
	}
	if reserved != p.ledger.counts.Reserved || p.ledger.reservedNow.Load() != p.ledger.counts.Reserved {
		return fmt.Errorf("reserved counts %d, segments and pages hold %d", p.ledger.counts.Reserved, reserved)
	}
	var allocs, frees, sumAllocated, sumRequested int64
	for i := range p.front.shards {
		allocs += p.front.shards[i].allocs
		frees += p.front.shards[i].frees
		sumAllocated += p.front.shards[i].allocated
		sumRequested += p.front.shards[i].requested
	}
	if allocated != sumAllocated || requested != sumRequested {
		return fmt.Errorf("allocated/requested count %d/%d, live blocks hold %d/%d",
			sumAllocated, sumRequested, allocated, requested)
	}
	if allocs-frees != live {
		return fmt.Errorf("counters say %d blocks live, %d are", allocs-frees, live)
	}
	if p.ledger.counts.PeakReserved < p.ledger.counts.Reserved {
		return fmt.Errorf("peak reserved %d is below reserved %d", p.ledger.counts.PeakReserved, p.ledger.counts.Reserved)
	}
	return nil
}

// checkTrimmed verifies what EmptyCache leaves: no cached blocks, no idle
// pages, no classic segment without a live block, and no whole page under a
// free block. Called while no other goroutine uses the pool.
func (p *Pool) checkTrimmed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idleHandles()) != 0 {
		return fmt.Errorf("%d idle handles kept", len(p.idleHandles()))
	}
	for i := range p.front.shards {
		if p.front.shards[i].bytes != 0 {
			return fmt.Errorf("shard %d still caches %d bytes", i, p.front.shards[i].bytes)
		}
	}
	for _, a := range p.arenas.byKey {
		for _, s := range a.segments {
			if !a.expandable && s.fullyFree() {
				return fmt.Errorf("segment %#x holds no live block", s.ptr)
			}
		}
		for _, b := range a.free.blocks {
			if n := len(b.seg.mappedIn(b.ptr, b.end())); a.expandable && n > 0 {
				return fmt.Errorf("free block %#x keeps %d whole handles mapped", b.ptr, n)
			}
		}
	}
	return nil
}

// coversRange reports whether the mappings of s cover [lo, hi) without a gap.
func coversRange(s *segment, lo, hi uintptr) bool {
	at := lo
	for _, hd := range s.mapped {
		if hd.end() <= at {
			continue
		}
		if hd.ptr > at {
			return false
		}
		at = hd.end()
		if at >= hi {
			return true
		}
	}
	return at >= hi
}

func (s blockState) String() string {
	return [...]string{"free", "in use", "pending", "hole", "moving"}[s]
}

func (s *freeSet) has(b *block) bool {
	i := s.lowerBound(b.size)
	for ; i < len(s.blocks) && s.blocks[i].size == b.size; i++ {
		if s.blocks[i] == b {
			return true
		}
	}
	return false
}

// idleHandles returns the handles held unmapped. Called with p.mu held.
func (p *Pool) idleHandles() []*handle {
	if p.pages == nil {
		return nil
	}
	return p.pages.idle
}
