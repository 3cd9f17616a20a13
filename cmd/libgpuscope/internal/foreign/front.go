package foreign

import (
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/ccall"
)

// A library's pair of the same size, freed and allocated again, is served
// by a cache on the C side of the crossing (clib's frontcache.c): the
// blocks the library freed of the scope current on a device, kept for its
// next allocation of the same size on the same stream. To this package a
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

// FrontCacheBlocks is how many blocks a device's front cache holds at most.
const FrontCacheBlocks = 32

// FrontCache is the C side's cache, as clib implements it. Its methods
// are safe from any goroutine.
type FrontCache interface {
	// Reset empties device i's cache into blocks, returning how many it
	// held, and makes it serve the scope of token tok (0: none; the cache
	// is then off).
	Reset(i int, tok uint64, blocks *[FrontCacheBlocks]uintptr) int
	// Take empties device i's cache into blocks, returning how many it held.
	Take(i int, blocks *[FrontCacheBlocks]uintptr) int
	// Hits returns how many allocations device i's cache served.
	Hits(i int) int64
}

// frontCache holds the process's front cache; nil where no C entry point
// is linked.
var frontCache atomic.Pointer[FrontCache]

// SetFrontCache makes f the front cache, before the entry points that
// keep it open a device.
func SetFrontCache(f FrontCache) { frontCache.Store(&f) }

// cache returns the front cache, or nil.
func cache() FrontCache {
	if f := frontCache.Load(); f != nil {
		return *f
	}
	return nil
}

// tokens numbers records for the front cache: a record's token is never
// another's, so that the cache never takes a block of a scope that ended
// for one of the scope current now.
var tokens atomic.Uint64

// setCurrent makes r the scope current on d, the front cache's blocks of
// the one current before freed first (they were that scope's). Called with
// d.mu held, or while d is not yet reachable.
func (d *device) setCurrent(r *record) {
	d.frontOff()
	d.current.Store(r)
	d.frontOn(r.tok)
}

// frontOn turns d's front cache on, empty, for the scope of token tok,
// unless a recording holds it off. Called with it off.
func (d *device) frontOn(tok uint64) {
	if front := cache(); front != nil && !d.held.Load() {
		front.Reset(d.index, tok, new([FrontCacheBlocks]uintptr)) // empty: it was off
	}
}

// holdFront keeps d's front cache off, and empty, while on: the device's
// recording then sees every allocation the library makes.
func (d *device) holdFront(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held.Store(on)
	if on {
		d.frontOff()
	} else {
		d.frontOn(d.current.Load().tok)
	}
}

// frontOff turns d's front cache off, and frees what it held.
func (d *device) frontOff() {
	front := cache()
	if front == nil {
		return
	}
	var blocks [FrontCacheBlocks]uintptr
	n := front.Reset(d.index, 0, &blocks)
	freeTaken(d.index, blocks[:n])
}

// flushFront frees the blocks device i's front cache holds, and reports
// whether there were any.
func flushFront(i int) bool {
	front := cache()
	if front == nil {
		return false
	}
	var blocks [FrontCacheBlocks]uintptr
	n := front.Take(i, &blocks)
	freeTaken(i, blocks[:n])
	return n > 0
}

// freeTaken frees blocks the front cache of device i held: the library
// freed them. Each is a live allocation of the library's, so that a
// failure is a bug of this package's; it is reported as a failed free.
func freeTaken(i int, blocks []uintptr) {
	for _, ptr := range blocks {
		if err := Free(i, ptr, -1, 0); err != nil {
			ccall.Fail("gpuscope_free", err)
		}
	}
}

// AllocAfter frees the blocks a front cache of device i gave back, then
// allocates as Alloc does, and returns with the address the token of the
// scope the allocation belongs to.
func AllocAfter(flush []uintptr, i int, size int64, stream uintptr) (uintptr, uint64, error) {
	freeTaken(i, flush)
	return alloc(i, size, stream)
}

// frontHits returns how many allocations device i's front cache served.
func frontHits(i int) int64 {
	front := cache()
	if front == nil {
		return 0
	}
	return front.Hits(i)
}
