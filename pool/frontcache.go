package pool

import "sync"

// cacheKey names a front-cache bin: blocks freed on one stream for one
// rounded size.
type cacheKey struct {
	stream uintptr
	size   int64
}

// shard is one front cache. Each P tends to get the same shard back (see
// Pool.getShard), so a hit takes an uncontended lock.
type shard struct {
	mu        sync.Mutex // protects the fields below
	bins      binTable
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

// account counts an allocation (n > 0) or a free (n < 0) of n bytes for req
// requested. It reports whether this shard passed its threshold (highWater,
// set by Pool.notePeak), when the caller should raise the pool's peak. The
// peak so kept is exact while one goroutine allocates; under concurrent
// allocation it may miss a peak that no shard saw pass its threshold, a
// price paid so that a hit writes no shared cache line.
func (s *shard) account(n, req int64) bool {
	s.allocated += n
	a := s.allocated
	s.requested += req
	if n > 0 {
		s.allocs++
		s.bytesIn += n
	} else {
		s.frees++
		s.bytesOut -= n
	}
	peak := false
	if a > s.highWater {
		s.highWater = a
		peak = true
	}
	if c := s.allocs - s.frees; c > s.liveHigh {
		s.liveHigh = c
		peak = true
	}
	return peak
}

func (s *shard) pop(k cacheKey) *block {
	bin := s.bins.find(k)
	if bin == nil || len(bin.blocks) == 0 {
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
	bin := s.bins.findOrAdd(k)
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
	b.shard = s
	b.live.Store(b.gen)
	return s.account(b.size, size)
}

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
func (t *binTable) reset() {
	clear(t.slots)
	t.n = 0
}

// getShard returns the shard of the calling P: sync.Pool keeps one per P,
// and a shard it drops (at a GC) is only a pointer into p.shards, so nothing
// is lost. A shard taken up anew is re-based (see notePeak), so that the
// peak stays exact for a goroutine that a GC moved to another shard.
func (p *Pool) getShard() *shard {
	if s, ok := p.shardOfP.Get().(*shard); ok {
		return s
	}
	i := p.nextShard.Add(1)
	s := &p.shards[int(i)%len(p.shards)]
	p.notePeak(s)
	return s
}

func (p *Pool) putShard(s *shard) { p.shardOfP.Put(s) }

// stealExact takes a cached block of key from a shard other than own.
func (p *Pool) stealExact(k cacheKey, own *shard) *block {
	for i := range p.shards {
		s := &p.shards[i]
		if s == own {
			continue
		}
		s.mu.Lock()
		b := s.pop(k)
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
				b.seg.arena.release(b)
			}
		})
		s.bins.reset()
		s.bytes = 0
		s.mu.Unlock()
	}
}
