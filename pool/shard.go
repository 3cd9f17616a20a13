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
// stack lies (see frontCache.lock), so a hit takes an uncontended lock.
//
// The state of the blocks a shard holds, cached or handed out by it
// (block.live, key, requested), is guarded by its mu: a block changes shard
// only under the lock of the shard it leaves.
type shard struct {
	mu        sync.Mutex // protects the fields below
	bins      binTable
	lastBin   *bin   // the bin of the last pop or push: the hit path's usual key
	last      *block // the block cached last: the only one a hit hands out (see popLast)
	bytes     int64  // bytes of the blocks in bins
	allocs    int64  // allocations accounted here
	hits      int64  // of which the bins served
	frees     int64  // frees accounted here
	allocated int64  // bytes allocated minus freed here
	requested int64  // the same for requested bytes
	bytesIn   int64  // bytes allocated here, in all
	bytesOut  int64  // bytes freed here, in all
	highWater int64  // allocated passing it raises the pool's peak (see frontCache.notePeak)
	liveHigh  int64  // allocs-frees passing it raises the pool's peak of live blocks
	_         [cacheLine]byte
}

// A shard's lock is its first field: frontCache.shardOf turns a block's
// owner, a shard's lock, back into the shard.
const _ uintptr = -unsafe.Offsetof(shard{}.mu)

// cacheLine is the size of a CPU cache line: padding of this many bytes
// keeps hot fields that different goroutines write apart.
const cacheLine = 64

// account counts an allocation of n bytes for req requested. It reports
// whether this shard passed its threshold (highWater or liveHigh, set by
// frontCache.notePeak), when the caller must raise the pool's peaks. Called with
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

// binOf returns the bin of k, nil where s has none. Inlined: the hit
// path's usual key is the last one's.
func (s *shard) binOf(k cacheKey) *bin {
	if bin := s.lastBin; bin != nil && bin.key == k {
		return bin
	}
	return s.findBin(k)
}

// findBin is binOf for a key other than the last one.
func (s *shard) findBin(k cacheKey) *bin {
	bin := s.bins.find(k)
	if bin != nil {
		s.lastBin = bin
	}
	return bin
}

// popLast takes the block s cached last where it is of k, else nil, and
// leaves the bin as it is: a hit hands out only the block just freed. An
// older cached block lies where an earlier request of its size was put;
// handed out there, it keeps apart free memory that best fit would join
// and take from the start of, as it does after a miss drains the cache
// into the arena. With a hit for any cached block, 4 of the generation
// shape's 64 seeds (workload.GPT2Generation) reserved a 2 MiB page more
// than the model of PyTorch expandable with no cap; with this, none of
// 192 does (docs/pool.md, "How it works").
func (s *shard) popLast(k cacheKey) *block {
	bin := s.binOf(k)
	if bin == nil || len(bin.blocks) == 0 || bin.blocks[len(bin.blocks)-1] != s.last {
		return nil
	}
	return s.popFrom(bin)
}

// popFrom takes the newest block of bin, which has one.
func (s *shard) popFrom(bin *bin) *block {
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
	s.last = b
}

// handOut records that b now serves a request of size bytes rounded to r,
// from this shard. It reports whether the shard passed its high-water mark.
// Called with s.mu held.
func (s *shard) handOut(b *block, r, size int64) bool {
	b.gen++
	b.key = r
	b.requested = size
	if b.owner.Load() != &s.mu {
		b.owner.Store(&s.mu)
	}
	b.live = b.gen
	return s.account(b.size, size)
}

// disown lets go of b, which leaves s for an arena or another shard: a stale
// Free that finds b through s no longer finds it there. Called with s.mu
// held.
func disown(b *block) { b.owner.Store(nil) }

// bin holds the cached blocks of one key.
type bin struct {
	key    cacheKey
	blocks []*block
}

// binTable is an open-addressing hash table of bins, faster than a Go map
// with a struct key on the hot path.
type binTable struct {
	slots []*bin // power-of-two length; nil is empty
	n     int
	spare []*bin // bins reset forgot, empty, for findOrAdd to reuse (see reset)
}

// Constants of the hashes of cache keys and stacks.
const (
	goldenRatio64 = 0x9E3779B97F4A7C15 // 2^64 divided by the golden ratio: Fibonacci hashing
	splitMix64    = 0xBF58476D1CE4E5B9 // a multiplier of SplitMix64's finalizer
	sizeShift     = 9                  // log2(minBlock): the bits of a rounded size that vary
	hashShift     = 32                 // the high half of a product, the well-mixed bits
)

func (k cacheKey) hash() uint64 {
	return (uint64(k.size)>>sizeShift ^ uint64(k.stream)*goldenRatio64) * splitMix64
}

func (t *binTable) find(k cacheKey) *bin {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := k.hash() >> hashShift & mask; ; i = (i + 1) & mask {
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
	var b *bin
	if n := len(t.spare); n > 0 {
		b, t.spare = t.spare[n-1], t.spare[:n-1]
		b.key = k
	} else {
		b = &bin{key: k}
	}
	t.insert(b)
	return b
}

func (t *binTable) insert(b *bin) {
	mask := uint64(len(t.slots) - 1)
	i := b.key.hash() >> hashShift & mask
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

// resetBins forgets every bin.
func (s *shard) resetBins() {
	s.bins.reset()
	s.lastBin, s.last = nil, nil
}

// binKeep is the most blocks a bin that a drain keeps has room for: a
// kept bin serves whichever key is pushed next, and a bin that held many
// blocks of one key, kept whole, would keep that room for a key of few,
// until every bin had room for the most any key ever held.
const binKeep = 64

// reset forgets every bin, keeping each, emptied, for findOrAdd: the
// pushes after a drain of the front cache are of the same keys, and a new
// bin, and its slice grown anew, made a miss (a drain) cost a third more
// on vit_infer_dynamic, in allocations and the collector's write barriers,
// once a hit served only the block cached last.
func (t *binTable) reset() {
	for i, b := range t.slots {
		if b != nil {
			if cap(b.blocks) > binKeep {
				b.blocks = nil
			} else {
				clear(b.blocks)
				b.blocks = b.blocks[:0]
			}
			t.spare = append(t.spare, b)
			t.slots[i] = nil
		}
	}
	t.n = 0
}
