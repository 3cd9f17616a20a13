package pool

import (
	"sync"
	"unsafe"
)

// cacheKey names a front-cache bin: blocks freed on one stream for one
// rounded size.
type cacheKey struct {
	stream uintptr
	size   int64
}

// shard is one front cache. A goroutine finds its shard from where its
// stack lies (see Pool.lockShard), so a hit takes an uncontended lock.
//
// The state of the blocks a shard holds, cached or handed out by it
// (block.live, key, requested), is guarded by its mu: a block changes shard
// only under the lock of the shard it leaves.
type shard struct {
	mu        sync.Mutex // protects the fields below
	bins      binTable
	lastBin   *bin  // the bin of the last pop or push: the hit path's usual key
	bytes     int64 // bytes of the blocks in bins
	allocs    int64 // allocations accounted here
	hits      int64 // of which the bins served
	frees     int64 // frees accounted here
	allocated int64 // bytes allocated minus freed here
	requested int64 // the same for requested bytes
	bytesIn   int64 // bytes allocated here, in all
	bytesOut  int64 // bytes freed here, in all
	highWater int64 // allocated passing it raises the pool's peak (see Pool.notePeak)
	liveHigh  int64 // allocs-frees passing it raises the pool's peak of live blocks
	_         [64]byte
}

// account counts an allocation of n bytes for req requested. It reports
// whether this shard passed its threshold (highWater or liveHigh, set by
// Pool.notePeak), when the caller must raise the pool's peaks. Called with
// s.mu held.
func (s *shard) account(n, req int64) bool {
	s.allocated += n
	s.requested += req
	s.allocs++
	s.bytesIn += n
	return s.allocated > s.highWater || s.allocs-s.frees > s.liveHigh
}

// accountFree counts a free of n bytes for req requested.
func (s *shard) accountFree(n, req int64) {
	s.allocated -= n
	s.requested -= req
	s.frees++
	s.bytesOut += n
}

func (s *shard) pop(k cacheKey) *block {
	bin := s.lastBin
	if bin == nil || bin.key != k {
		if bin = s.bins.find(k); bin == nil {
			return nil
		}
		s.lastBin = bin
	}
	if len(bin.blocks) == 0 {
		return nil
	}
	b := bin.blocks[len(bin.blocks)-1]
	bin.blocks[len(bin.blocks)-1] = nil
	bin.blocks = bin.blocks[:len(bin.blocks)-1]
	s.bytes -= b.size
	s.hits++
	return b
}

func (s *shard) push(k cacheKey, b *block) {
	bin := s.lastBin
	if bin == nil || bin.key != k {
		bin = s.bins.findOrAdd(k)
		s.lastBin = bin
	}
	bin.blocks = append(bin.blocks, b)
	s.bytes += b.size
}

// handOut records that b now serves a request of size bytes rounded to r,
// from this shard. It reports whether the shard passed its high-water mark.
// Called with s.mu held.
func (s *shard) handOut(b *block, r, size int64) bool {
	b.gen++
	b.key = r
	b.requested = size
	if b.shard.Load() != s {
		b.shard.Store(s)
	}
	b.live = b.gen
	return s.account(b.size, size)
}

// disown lets go of b, which leaves s for an arena or another shard: a stale
// Free that finds b through s no longer finds it there. Called with s.mu
// held.
func disown(b *block) { b.shard.Store(nil) }

// bin holds the cached blocks of one key.
type bin struct {
	key    cacheKey
	blocks []*block
}

// binTable is an open-addressing hash table of bins, faster than a Go map
// with a struct key on the hot path (measured: the map was 60% of a hit).
type binTable struct {
	slots []*bin // power-of-two length; nil is empty
	n     int
}

func (k cacheKey) hash() uint64 {
	return (uint64(k.size)>>9 ^ uint64(k.stream)*0x9E3779B97F4A7C15) * 0xBF58476D1CE4E5B9
}

func (t *binTable) find(k cacheKey) *bin {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := k.hash() >> 32 & mask; ; i = (i + 1) & mask {
		b := t.slots[i]
		if b == nil || b.key == k {
			return b
		}
	}
}

func (t *binTable) findOrAdd(k cacheKey) *bin {
	if b := t.find(k); b != nil {
		return b
	}
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		t.slots = make([]*bin, max(16, 2*len(old)))
		t.n = 0
		for _, b := range old {
			if b != nil {
				t.insert(b)
			}
		}
	}
	b := &bin{key: k}
	t.insert(b)
	return b
}

func (t *binTable) insert(b *bin) {
	mask := uint64(len(t.slots) - 1)
	i := b.key.hash() >> 32 & mask
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = b
	t.n++
}

// each calls fn for every bin.
func (t *binTable) each(fn func(*bin)) {
	for _, b := range t.slots {
		if b != nil {
			fn(b)
		}
	}
}

// reset forgets every bin.
func (s *shard) resetBins() {
	s.bins.reset()
	s.lastBin = nil
}

func (t *binTable) reset() {
	clear(t.slots)
	t.n = 0
}

// lockShard locks and returns the calling goroutine's shard. The shard is
// found from where the goroutine's stack lies, so that one goroutine keeps
// coming back to the same shard and goroutines running at once use
// different ones: p.stackKeys remembers the stack (key) that used each
// shard last, apart from the shards so that reading it costs no cache miss,
// and a goroutine looks, from its home shard on, for the shard with its
// key (see findShard). Where that shard is held, the next free one serves. The runtime offers no P-local storage
// without go:linkname; this costs no atomic write beyond the lock and no
// sync.Pool round trip. The address taken is in lockShard's own frame, so
// it moves only with the depth of the call.
//
// Which shard serves a goroutine does not matter to the peaks: see
// Pool.notePeak.
func (p *Pool) lockShard() *shard {
	var here byte
	key := uintptr(unsafe.Pointer(&here)) >> 13 // 8 KiB: the same for one goroutine at nearby depths
	n := uint64(len(p.shards))
	home := (uint64(key) * 0x9E3779B97F4A7C15 >> 32) * n >> 32
	i := home
	if p.stackKeys[i].Load() != key {
		i = p.findShard(home, key)
	}
	sh := &p.shards[i]
	if !sh.mu.TryLock() {
		i, sh = p.lockNext(i)
	}
	if p.stackKeys[i].Load() != key {
		p.stackKeys[i].Store(key)
	}
	return sh
}

// findShard returns the shard that stack key used last among the few
// from home on, else one of them that no goroutine used yet, else one of
// them in turn: key claims it. Claiming in turn rather than always home
// keeps two goroutines whose homes collide from taking the same shard from
// each other at every call.
func (p *Pool) findShard(home uint64, key uintptr) uint64 {
	n := uint64(len(p.shards))
	w := min(n, shardWindow)
	unused := n
	for j := range w {
		i := (home + j) % n
		switch p.stackKeys[i].Load() {
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
	return (home + uint64(p.claims.Add(1))%w) % n
}

// shardWindow is how many shards from its home a goroutine may use.
const shardWindow = 4

// lockNext locks the first free shard after shard i, or else shard i, and
// returns it with its index.
func (p *Pool) lockNext(i uint64) (uint64, *shard) {
	n := uint64(len(p.shards))
	for j := uint64(1); j < n; j++ {
		k := (i + j) % n
		if sh := &p.shards[k]; sh.mu.TryLock() {
			return k, sh
		}
	}
	sh := &p.shards[i]
	sh.mu.Lock()
	return i, sh
}

// stealExact takes a cached block of key from a shard other than own.
func (p *Pool) stealExact(k cacheKey, own *shard) *block {
	for i := range p.shards {
		s := &p.shards[i]
		if s == own {
			continue
		}
		s.mu.Lock()
		b := s.pop(k)
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

// drainShards moves every front-cached block back to its arena, where it can
// coalesce with its neighbours. Called with p.mu held.
func (p *Pool) drainShards() {
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		s.bins.each(func(bn *bin) {
			for _, b := range bn.blocks {
				disown(b)
				b.seg.arena.release(b)
			}
		})
		s.resetBins()
		s.bytes = 0
		s.mu.Unlock()
	}
}
