package foreign

import (
	"sync"

	"github.com/gpuscope/gpuscope/gpu"
)

// entry is one live allocation of a library: its address, the Buffer that
// holds it and the record (scope) that owns it now.
type entry struct {
	ptr    uintptr // 0: an empty place
	rec    *record
	buf    gpu.Buffer
	stream uintptr // the library's stream it was allocated for (0: the default stream)
	id     uint64  // the allocation's id: a free from the pair cache names it (paircache.go)
}

// tableShards is how many independently locked parts the table has: enough
// that threads allocating at once seldom meet on one lock.
const tableShards = 64

// table maps the address of every live allocation made through this
// package to its entry. It is an open-addressed hash with linear probing,
// in shards chosen by the address's hash; each shard grows by doubling
// (rarely: the table holds as many entries as libraries hold buffers) and
// deletes by shifting back, so it holds no tombstones.
type table struct {
	shards [tableShards]shard
}

type shard struct {
	mu      sync.Mutex // protects the fields below
	entries []entry    // a power of two in length, at most half full
	n       int
	_       [40]byte // keeps shards on cache lines of their own
}

// hash spreads an address over 64 bits: the top bits pick the shard, the
// low bits the place in it. Addresses are multiples of 512 bytes, and of
// 2 MiB for large blocks: a multiplication alone keeps those zeros at the
// bottom, so the bits are mixed both ways (splitmix64's finalizer).
func hash(ptr uintptr) uint64 {
	x := uint64(ptr)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (t *table) shardOf(h uint64) *shard { return &t.shards[h>>(64-6)] }

// find returns the index of ptr's entry in s, or -1. Called with s.mu held.
func (s *shard) find(ptr uintptr, h uint64) int {
	if len(s.entries) == 0 {
		return -1
	}
	mask := uint64(len(s.entries) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch s.entries[i].ptr {
		case ptr:
			return int(i)
		case 0:
			return -1
		}
	}
}

// put stores e, replacing an entry of the same address. Called with s.mu
// held.
func (s *shard) put(e entry, h uint64) {
	if 2*(s.n+1) > len(s.entries) {
		s.grow()
	}
	mask := uint64(len(s.entries) - 1)
	i := h & mask
	for s.entries[i].ptr != 0 && s.entries[i].ptr != e.ptr {
		i = (i + 1) & mask
	}
	if s.entries[i].ptr == 0 {
		s.n++
	}
	s.entries[i] = e
}

// grow doubles the shard.
func (s *shard) grow() { s.resize(max(minShard, 2*len(s.entries))) }

// minShard is the fewest places a shard has once it has any.
const minShard = 16

// shrink makes the shard smaller where it is less than an eighth full, to
// about a quarter, so that a burst of live allocations does not leave it
// large for good: every scope's end reads it whole. Called with s.mu held,
// never while the caller walks its places.
func (s *shard) shrink() {
	if len(s.entries) > minShard && 8*s.n < len(s.entries) {
		size := minShard
		for size < 4*s.n {
			size *= 2
		}
		s.resize(size)
	}
}

// resize moves the shard's entries to size places, a power of two.
func (s *shard) resize(size int) {
	old := s.entries
	s.entries = make([]entry, size)
	s.n = 0
	mask := uint64(len(s.entries) - 1)
	for _, e := range old {
		if e.ptr == 0 {
			continue
		}
		i := hash(e.ptr) & mask
		for s.entries[i].ptr != 0 {
			i = (i + 1) & mask
		}
		s.entries[i] = e
		s.n++
	}
}

// remove deletes the entry at index i, moving later entries of its probe
// run back so that no lookup stops early (Knuth's algorithm R). Called
// with s.mu held; shrink after.
func (s *shard) remove(i int) {
	mask := len(s.entries) - 1
	for j := i; ; {
		j = (j + 1) & mask
		if s.entries[j].ptr == 0 {
			break
		}
		// The entry at j stays where its home is cyclically in (i, j].
		k := int(hash(s.entries[j].ptr)) & mask
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		s.entries[i] = s.entries[j]
		i = j
	}
	s.entries[i] = entry{}
	s.n--
}

// each calls fn for every entry, shard by shard with the shard's lock
// held; fn may change the entry, or ask for its removal by returning true.
func (t *table) each(fn func(e *entry) (remove bool)) {
	for k := range t.shards {
		s := &t.shards[k]
		s.mu.Lock()
		for i := 0; i < len(s.entries); {
			if s.entries[i].ptr != 0 && fn(&s.entries[i]) {
				s.remove(i) // an entry from later may now sit at i: look again
				continue
			}
			i++
		}
		s.shrink()
		s.mu.Unlock()
	}
}
