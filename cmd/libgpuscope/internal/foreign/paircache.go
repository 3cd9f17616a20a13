package foreign

import (
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/ccall"
)

// A library's pair of the same size, freed and allocated again, is served
// by a cache on the C side of the crossing (clib's paircache.c): the
// blocks the library freed on a device, kept for its next allocation of
// the same size on the same stream in the same scope. To this package a
// cached block is still an allocation of the scope, so that it never
// serves another; the cache gives its blocks back to be freed here before
// every allocation it does not serve, so that a scope's Peak and the
// device's are those of what the library holds, and before anyone reads
// the device's figures (Stats, Summary, from C or from Go, and Snapshot,
// which gputest reads), changes its cap, ends a scope or finds the pool
// short, a Go allocation on the device included (internal/extcache
// is how the device asks): they are exact when read, and the cache costs
// the pool no memory it needs. While the device records, the cache is off,
// so that the recording sees every allocation. docs/interop.md gives the
// figures.

// PairCacheBlocks is how many blocks a device's pair cache holds at most.
const PairCacheBlocks = 32

// PairCache is the C side's cache, as clib implements it. Its methods
// are safe from any goroutine.
type PairCache interface {
	// Reset empties device i's cache into blocks, returning how many it
	// held, and turns it on or off. It serves every scope, each block to
	// the scope it was allocated in.
	Reset(i int, on bool, blocks *[PairCacheBlocks]uintptr) int
	// Take empties device i's cache into blocks, returning how many it held.
	Take(i int, blocks *[PairCacheBlocks]uintptr) int
	// Hits returns how many allocations device i's cache served.
	Hits(i int) int64
}

// pairCache holds the process's pair cache; nil where no C entry point
// is linked.
var pairCache atomic.Pointer[PairCache]

// SetPairCache makes f the pair cache, before the entry points that
// keep it open a device.
func SetPairCache(f PairCache) { pairCache.Store(&f) }

// cache returns the pair cache, or nil.
func cache() PairCache {
	if f := pairCache.Load(); f != nil {
		return *f
	}
	return nil
}

// pairsOn turns d's pair cache on, empty, unless a recording holds it
// off. Called with it off.
func (d *device) pairsOn() {
	if pc := cache(); pc != nil && !d.held.Load() {
		pc.Reset(d.index, true, new([PairCacheBlocks]uintptr)) // empty: it was off
	}
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

// pairsOff turns d's pair cache off, and frees what it held.
func (d *device) pairsOff() {
	pc := cache()
	if pc == nil {
		return
	}
	var blocks [PairCacheBlocks]uintptr
	n := pc.Reset(d.index, false, &blocks)
	freeTaken(d.index, blocks[:n])
}

// flushPairs frees the blocks device i's pair cache holds, and reports
// whether there were any.
func flushPairs(i int) bool {
	pc := cache()
	if pc == nil {
		return false
	}
	var blocks [PairCacheBlocks]uintptr
	n := pc.Take(i, &blocks)
	freeTaken(i, blocks[:n])
	return n > 0
}

// freeTaken frees blocks the pair cache of device i held: the library
// freed them. Each is a live allocation of the library's, so that a
// failure is a bug of this package's; it is reported as a failed free.
func freeTaken(i int, blocks []uintptr) {
	for _, ptr := range blocks {
		if err := Free(i, ptr, -1, 0); err != nil {
			ccall.Fail("gpuscope_free", err)
		}
	}
}

// AllocAfter frees the blocks a pair cache of device i gave back, then
// allocates as Alloc does.
func AllocAfter(flush []uintptr, i int, scope int64, size int64, stream uintptr) (uintptr, error) {
	freeTaken(i, flush)
	return Alloc(i, scope, size, stream)
}

// pairHits returns how many allocations device i's pair cache served.
func pairHits(i int) int64 {
	pc := cache()
	if pc == nil {
		return 0
	}
	return pc.Hits(i)
}
