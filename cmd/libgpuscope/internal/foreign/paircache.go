package foreign

import (
	"os"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/ccall"
	"github.com/gpuscope/gpuscope/pool"
)

// A library's pair of the same size, freed and allocated again, is served
// by the pair cache on the C side of the crossing (clib's paircache.c). Its
// table tracks the allocations made through the entry points, with the id
// of each one's entry here; the cache keeps the newest blocks the library
// freed, PairCacheBlocks of them, for its next allocation of the same size
// on the same stream in the same scope, and evicts the oldest for one more.
//
// One owner at a time: to this package a block the cache holds is still an
// allocation of its scope, so that it never serves another, but only the
// cache frees it, by handing it back (Release) with its allocation's id;
// an id that is not the live allocation's at that address is a block a
// scope's end freed meanwhile, and nothing is freed (TestALateRelease...).
// A scope's end takes the scope's blocks out of the cache first (pc_end).
//
// Exact figures: a block the cache holds counts as allocated here, so that
// an allocation made here while it holds blocks would count them in the
// peaks. Before one that could raise a peak (makeRoom), the cache gives
// back its oldest blocks until it cannot; a peak is then the most the
// library held at once. Before anyone reads the device's figures (Stats,
// Summary, from C or from Go, and Snapshot, which gputest reads), changes
// its cap or finds the pool short, the cache gives back all it holds
// (internal/extcache is how the device asks), so that they are exact when
// read and the cache costs the pool no memory it needs. While the device
// records, the cache is off, so that the recording sees every allocation.
// docs/interop.md gives the figures.

// PairCacheBlocks is how many blocks a device's pair cache keeps to serve.
const PairCacheBlocks = 32

// smallMax is the largest request the pool serves from its small blocks
// (pool's smallMax): a block of the other class never serves it.
const smallMax = 1 << 20

// PairCacheOut is the most blocks one call of the cache's hands back.
const PairCacheOut = 64

// Block is an allocation as the pair cache's table notes it, and as the
// cache hands it back to be freed: its address and its allocation's id,
// never another allocation's.
type Block struct {
	Ptr uintptr
	ID  uint64
}

// Cached is a block the pair cache holds, as List shows it: the id of
// its scope, its size as the library asked for it and its stream.
type Cached struct {
	Block
	Scope  int64
	Size   int64
	Stream uintptr
}

// PairCache is the C side's cache, as clib implements it. Its methods are
// safe from any goroutine; a scope is named by its id (0: a device's root).
type PairCache interface {
	// Set turns device i's cache on or off; off, it hands back what it
	// held into out and returns how many, and tracks nothing.
	Set(i int, on bool, out *[PairCacheOut]Block) int
	// Reset forgets device i: off, no scope open, its counts 0.
	Reset(i int)
	// Begin notes that scope has begun on device i; the cache serves and
	// tracks the scope's allocations only where track says.
	Begin(i int, scope int64, track bool)
	// End hands back the blocks of scope, which ends, into out, returning
	// how many, and forgets its live allocations where freeLive says,
	// else makes them parent's: from then on the table tracks none of
	// the scope's, whose id a thread may still name.
	End(i int, scope, parent int64, freeLive bool, out *[PairCacheOut]Block) int
	// Take hands back what device i's cache holds into out, returning how
	// many.
	Take(i int, out *[PairCacheOut]Block) int
	// List shows the blocks device i's cache holds, oldest first, in out,
	// and returns how many.
	List(i int, out *[PairCacheOut]Cached) int
	// Evict hands back ptr, which device i's cache held; false where it
	// holds it no longer (the library took it back).
	Evict(i int, ptr uintptr) (Block, bool)
	// Counts returns how many allocations device i's cache served, and
	// how many it looked at.
	Counts(i int) (hits, allocs int64)
}

// pairCache holds the process's pair cache; nil where no C entry point is
// linked.
var pairCache atomic.Pointer[PairCache]

// SetPairCache makes f the pair cache, before the entry points that keep
// it open a device.
func SetPairCache(f PairCache) { pairCache.Store(&f) }

// cache returns the pair cache, or nil.
func cache() PairCache {
	if f := pairCache.Load(); f != nil {
		return *f
	}
	return nil
}

// lateReleases counts the blocks the cache handed back after a scope's end
// had freed them: harmless, and nothing was freed.
var lateReleases atomic.Int64

// allocIDs numbers the allocations: an id is never another's.
var allocIDs atomic.Uint64

// pairsWanted reports whether GPUSCOPE_PAIR_CACHE leaves the pair cache
// on: it turns it off where it is 0, for a device opened or a scope begun.
func pairsWanted() bool { return os.Getenv("GPUSCOPE_PAIR_CACHE") != "0" }

// pairsOn turns d's pair cache on, unless a recording holds it off or
// GPUSCOPE_PAIR_CACHE=0 turned it off for the device. Called with it off.
func (d *device) pairsOn() {
	pc := cache()
	if pc == nil || d.held.Load() || !d.pairsWanted {
		return
	}
	pc.Set(d.index, true, new([PairCacheOut]Block)) // empty: it was off
	d.pairs.Store(true)
}

// pairsOff turns d's pair cache off, and frees what it held.
func (d *device) pairsOff() {
	pc := cache()
	if pc == nil {
		return
	}
	d.pairs.Store(false)
	var out [PairCacheOut]Block
	n := pc.Set(d.index, false, &out)
	Release(d.index, out[:n])
}

// holdPairs keeps d's pair cache off, and empty, while on: the device's
// recording then sees every allocation the library makes.
func (d *device) holdPairs(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held.Store(on)
	if on {
		d.pairsOff()
	} else {
		d.pairsOn()
	}
}

// pairsEnd has the pair cache hand back the blocks of r, which ends, and
// forget r's live allocations where free says that its end frees them,
// else make them its parent's: from then on the cache serves and tracks
// none of r's, before its end frees or passes on what the table holds.
// The cache's blocks are freed: the library freed them.
func (r *record) pairsEnd(free bool) {
	pc := cache()
	if pc == nil || r.streamOf != nil {
		return // a child on a stream: its blocks are its scope's
	}
	var parent int64
	if r.parent != nil {
		parent = r.parent.id
	}
	var out [PairCacheOut]Block
	n := pc.End(r.dev.index, r.id, parent, free, &out)
	Release(r.dev.index, out[:n])
}

// flushPairs frees the blocks device i's pair cache holds, and reports
// whether there were any.
func flushPairs(i int) bool {
	pc := cache()
	if pc == nil {
		return false
	}
	var out [PairCacheOut]Block
	n := pc.Take(i, &out)
	Release(i, out[:n])
	return n > 0
}

// Release frees blocks that the pair cache of device i handed back: the
// library freed them. A block whose id is not the live allocation's at its
// address was freed meanwhile by its scope's end, which the cache's hand
// crossed: it is counted and left. Any other failure is a bug of this
// package's, reported as a failed free.
func Release(i int, blocks []Block) {
	for _, b := range blocks {
		late, err := free(i, b.Ptr, b.ID, -1, ownStream)
		if late {
			lateReleases.Add(1)
		} else if err != nil {
			ccall.Fail("gpuscope_free", err)
		}
	}
}

// makeRoom has d's pair cache give back, before an allocation of size
// bytes in r that it did not serve, the blocks that would cost the
// allocation memory:
//
//   - those the pool could serve it from: of its class (small, up to 1 MiB,
//     or large) and at least half its size (a block half the size joins
//     the free memory beside it often enough). Held in the cache, they
//     would make the pool grow where it need not; given back, the shared
//     traces' peak reserved stays within 1% of the cache off's
//     (cmd/libgpuscope/internal/cthreads' TestThePairCacheOnTheSharedTraces);
//   - those it would count in a peak it raises, oldest first: the bytes of
//     r's scope and of each around it, up to the device's root, whose
//     scope holds all the library allocates (so that its peak is the
//     device's PeakAllocated), count the cache's blocks of their scope and
//     of those inside it. (The device's PeakActiveBlocks counts them, at
//     most PairCacheOut: keeping its count exact too would cost most hits
//     on the shared traces.)
//
// Called with d.allocMu held, so that no other allocation here comes
// between.
func (d *device) makeRoom(r *record, size int64) {
	pc := cache()
	if pc == nil {
		return
	}
	rounded := pool.Rounded(size)
	held := &d.listed
	n := pc.List(d.index, held)
	for k := 0; k < n; k++ {
		if b := pool.Rounded(held[k].Size); 2*b >= rounded && (b > smallMax) == (rounded > smallMax) {
			d.evict(pc, &held[k])
		}
	}
	for s := r; s != nil; s = s.parent {
		st := s.scope.Stats()
		over := st.Live + rounded - st.Peak
		for k := 0; k < n && over > 0; k++ {
			if held[k].Ptr != 0 && s.holds(held[k]) && d.evict(pc, &held[k]) {
				over -= pool.Rounded(held[k].Size)
			}
		}
	}
}

// evict has the cache give back c, where it holds it still (the library
// may have taken it back since the list was made), frees it and marks it
// taken; it reports whether it was freed.
func (d *device) evict(pc PairCache, c *Cached) bool {
	b, ok := pc.Evict(d.index, c.Ptr)
	if ok {
		Release(d.index, []Block{b})
	}
	c.Ptr = 0
	return ok
}

// holds reports whether c, a block the pair cache holds, is of r's scope
// or of one inside it: for the root, any block; for a child on a stream,
// one of its scope's on that stream.
func (r *record) holds(c Cached) bool {
	switch {
	case r.streamOf != nil:
		return c.Scope == r.streamOf.id && c.Stream == r.onHandle
	case r.parent == nil:
		return true
	}
	for s := lookup(c.Scope); s != nil; s = s.parent {
		if s == r {
			return true
		}
	}
	return false
}

// AllocAfter frees the blocks the pair cache of device i evicted, then
// allocates as Alloc does, where the cache held held blocks when it missed
// (< 0: unknown).
func AllocAfter(evicted []Block, held, i int, scope, size int64, stream uintptr) (Block, error) {
	Release(i, evicted)
	return alloc(i, scope, size, stream, held)
}

// AllocInAfter is AllocAfter for CuPy's form: in the scope param names, or
// where param is 0, in scope, the calling thread's.
func AllocInAfter(evicted []Block, held int, param int64, i int, scope, size int64) (Block, error) {
	Release(i, evicted)
	if param == 0 {
		return alloc(i, scope, size, 0, held)
	}
	return allocIn(param, i, size, 0, held)
}

// pairCounts returns how many allocations device i's pair cache served,
// and how many it looked at.
func pairCounts(i int) (hits, allocs int64) {
	pc := cache()
	if pc == nil {
		return 0, 0
	}
	return pc.Counts(i)
}
