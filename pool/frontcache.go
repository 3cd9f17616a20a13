package pool

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// frontCache is the pool's front cache: shards of freed small blocks, and
// the peaks of what the shards count. All its methods are safe for
// concurrent use; each says which locks it takes.
type frontCache struct {
	shards    []shard
	stackKeys []atomic.Uintptr // per shard, the stack of the goroutine that used it last (see lock); read-mostly
	claims    atomic.Uint32    // shards claimed by goroutines new to them (see findShard)

	// peakAllocated is raised when a shard passes its own high-water mark;
	// see shard.account. Current bytes are counted per shard, so that the
	// hit path writes no shared cache line.
	_             [cacheLine]byte
	peakAllocated atomic.Int64
	peakBlocks    atomic.Int64 // the same, for live blocks
	_             [cacheLine]byte
}

// newFrontCache returns a front cache of n shards.
func newFrontCache(n int) frontCache {
	return frontCache{shards: make([]shard, n), stackKeys: make([]atomic.Uintptr, n)}
}

// The shape of the search for a goroutine's shard.
const (
	stackShift  = 13 // 8 KiB: stack addresses that share a key, the same for one goroutine at nearby depths
	shardWindow = 4  // how many shards from its home a goroutine may use
)

// lock locks and returns the calling goroutine's shard. The shard is
// found from where the goroutine's stack lies, so that one goroutine keeps
// coming back to the same shard and goroutines running at once use
// different ones: c.stackKeys remembers the stack (key) that used each
// shard last, apart from the shards so that reading it costs no cache miss,
// and a goroutine looks, from its home shard on, for the shard with its
// key (see findShard). Where that shard is held, the next free one serves.
// The runtime offers no P-local storage without go:linkname; this costs no
// atomic write beyond the lock and no sync.Pool round trip. The address
// taken is in lock's own frame, so it moves only with the depth of the
// call.
//
// Which shard serves a goroutine does not matter to the peaks: see
// notePeak.
func (c *frontCache) lock() *shard {
	var here byte
	key := uintptr(unsafe.Pointer(&here)) >> stackShift
	n := uint64(len(c.shards))
	home := (uint64(key) * goldenRatio64 >> hashShift) * n >> hashShift
	i := home
	if c.stackKeys[i].Load() != key {
		i = c.findShard(home, key)
	}
	sh := &c.shards[i]
	if !sh.mu.TryLock() {
		i, sh = c.lockNext(i)
	}
	if c.stackKeys[i].Load() != key {
		c.stackKeys[i].Store(key)
	}
	return sh
}

// findShard returns the shard that stack key used last among the few
// from home on, else one of them that no goroutine used yet, else one of
// them in turn: key claims it. Claiming in turn rather than always home
// keeps two goroutines whose homes collide from taking the same shard from
// each other at every call.
func (c *frontCache) findShard(home uint64, key uintptr) uint64 {
	n := uint64(len(c.shards))
	w := min(n, shardWindow)
	unused := n
	for j := range w {
		i := wrap(home+j, n)
		switch c.stackKeys[i].Load() {
		case key:
			return i
		case 0:
			if unused == n {
				unused = i
			}
		}
	}
	if unused < n {
		return unused
	}
	return wrap(home+uint64(c.claims.Add(1))%w, n)
}

// wrap returns i modulo n, for i < 2n, with no division: findShard runs at
// every allocation of a goroutine whose home shard another stack holds, and
// a division or two there cost more than the rest of the search.
func wrap(i, n uint64) uint64 {
	if i >= n {
		i -= n
	}
	return i
}

// lockNext locks the first free shard after shard i, or else shard i, and
// returns it with its index.
func (c *frontCache) lockNext(i uint64) (uint64, *shard) {
	n := uint64(len(c.shards))
	for j := uint64(1); j < n; j++ {
		k := wrap(i+j, n)
		if sh := &c.shards[k]; sh.mu.TryLock() {
			return k, sh
		}
	}
	sh := &c.shards[i]
	sh.mu.Lock()
	return i, sh
}

// lockOwner locks and returns the shard of c that holds blk, which guards
// its state; nil where none does (blk is in an arena, not allocated, or
// another pool's).
func (c *frontCache) lockOwner(blk *block) *shard {
	for {
		mu := blk.owner.Load()
		if mu == nil {
			return nil
		}
		mu.Lock()
		if blk.owner.Load() != mu {
			mu.Unlock() // it moved while we waited
			continue
		}
		if sh := c.shardOf(mu); sh != nil {
			return sh
		}
		mu.Unlock()
		return nil
	}
}

// shardOf returns the shard of c whose lock is mu, which is the lock of
// some pool's shard (a block's owner is nothing else); nil where it is not
// one of c's. A lock within c's shards is one of theirs, so the range
// check is exact: no division to find the index, as every Free would pay.
func (c *frontCache) shardOf(mu *sync.Mutex) *shard {
	off := uintptr(unsafe.Pointer(mu)) - uintptr(unsafe.Pointer(unsafe.SliceData(c.shards)))
	if off >= uintptr(len(c.shards))*unsafe.Sizeof(shard{}) {
		return nil
	}
	return (*shard)(unsafe.Pointer(mu)) // mu is a shard's first field
}

// steal takes a cached block of key from a shard other than own: the one
// that shard cached last, as its own goroutine's hit would (shard.popLast),
// so that which shard a goroutine uses changes no block's place.
func (c *frontCache) steal(k cacheKey, own *shard) *block {
	for i := range c.shards {
		s := &c.shards[i]
		if s == own {
			continue
		}
		s.mu.Lock()
		b := s.popLast(k)
		if b != nil {
			disown(b)
		}
		s.mu.Unlock()
		if b != nil {
			return b
		}
	}
	return nil
}

// drain moves every cached block back to its arena in arenas, where it can
// coalesce with its neighbours. Called with the arenas' guard held.
func (c *frontCache) drain(arenas *arenaSet) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.bins.each(func(bn *bin) {
			for _, b := range bn.blocks {
				disown(b)
				arenas.release(b)
			}
		})
		s.resetBins()
		s.bytes = 0
		s.mu.Unlock()
	}
}

// lockAll locks every shard, in order.
func (c *frontCache) lockAll() {
	for i := range c.shards {
		c.shards[i].mu.Lock()
	}
}

// unlockAll unlocks every shard.
func (c *frontCache) unlockAll() {
	for i := range c.shards {
		c.shards[i].mu.Unlock()
	}
}

// notePeak raises the peaks to what is live now, summed over the shards,
// and hands out the thresholds again so that they add up to the peak: sh
// gets what the others leave. The peaks are then exact for one goroutine
// whichever shards it uses, and a lower bound under concurrent allocation
// (docs/pool.md, "Peaks", gives the argument). It holds every shard's lock
// at once, in order, so that the sum is one instant; callers hold none.
func (c *frontCache) notePeak(sh *shard) {
	c.lockAll()
	defer c.unlockAll()
	var total, blocks, highs, lives int64
	for i := range c.shards {
		s := &c.shards[i]
		total += s.allocated
		blocks += s.allocs - s.frees
		if s != sh {
			highs += s.highWater
			lives += s.liveHigh
		}
	}
	raiseTo(&c.peakAllocated, total)
	raiseTo(&c.peakBlocks, blocks)
	peak, peakBlocks := c.peakAllocated.Load(), c.peakBlocks.Load()
	if sh.highWater = peak - highs; sh.highWater < sh.allocated {
		for i := range c.shards {
			s := &c.shards[i]
			s.highWater = s.allocated
		}
		sh.highWater += peak - total
	}
	if sh.liveHigh = peakBlocks - lives; sh.liveHigh < sh.allocs-sh.frees {
		for i := range c.shards {
			s := &c.shards[i]
			s.liveHigh = s.allocs - s.frees
		}
		sh.liveHigh += peakBlocks - blocks
	}
}

// raiseTo sets peak to v if v is larger.
func raiseTo(peak *atomic.Int64, v int64) {
	for {
		old := peak.Load()
		if v <= old || peak.CompareAndSwap(old, v) {
			return
		}
	}
}

// resetPeaks sets the peaks to what is live now. It holds every shard at
// once, so that the thresholds add up to the peak (see notePeak).
func (c *frontCache) resetPeaks() {
	c.lockAll()
	defer c.unlockAll()
	var bytes, blocks int64
	for i := range c.shards {
		s := &c.shards[i]
		s.highWater, s.liveHigh = s.allocated, s.allocs-s.frees
		bytes += s.highWater
		blocks += s.liveHigh
	}
	c.peakAllocated.Store(bytes)
	c.peakBlocks.Store(blocks)
}

// allocated sums the shards' allocated bytes. It locks each shard in turn,
// so it is for the rare paths: a release threshold, an out-of-memory
// report.
func (c *frontCache) allocated() int64 {
	var n int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.allocated
		s.mu.Unlock()
	}
	return n
}

// addStats adds the shards' counters to st, locking each shard in turn
// unless the caller holds them all.
func (c *frontCache) addStats(st *Stats, locked bool) {
	for i := range c.shards {
		s := &c.shards[i]
		if !locked {
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
		if !locked {
			s.mu.Unlock()
		}
	}
}
