// Package extcache lets an external cache, one kept outside a device's pool
// (libgpuscope's pair cache, on the C side of its crossing into Go), give
// back what it holds whenever the device's figures must be exact or its
// memory is short: the blocks such a cache holds are allocations to the
// pool, freed by their owner but not yet given back. The cache's owner
// attaches it to the device it opened; package gpu asks it through Flush
// and Hold.
package extcache

import "sync"

// Cache is what a device asks of the external cache attached to it. Both
// functions are called from any goroutine, with none of the device's locks
// held.
type Cache struct {
	// Flush gives back what the cache holds, and reports whether it held
	// anything.
	Flush func() bool
	// Hold(true) gives back what the cache holds and keeps it from holding
	// more until Hold(false): while a recording runs, every allocation
	// reaches the pool, where the recording sees it.
	Hold func(on bool)
}

// caches maps a device (a *gpu.Device) to its external cache.
var caches sync.Map

// Attach attaches c to device d (a *gpu.Device): d asks it before its
// figures are read (Stats, Snapshot, Summary), before EmptyCache and a new
// cap, when an allocation finds it short of memory, and around a
// recording, until Detach.
func Attach(d any, c *Cache) { caches.Store(d, c) }

// Detach takes away d's external cache, if any.
func Detach(d any) { caches.Delete(d) }

// Flush has d's external cache give back what it holds, and reports
// whether it held anything; false where d has none.
func Flush(d any) bool {
	c, ok := caches.Load(d)
	return ok && c.(*Cache).Flush()
}

// Hold holds d's external cache, if any, empty while on.
func Hold(d any, on bool) {
	if c, ok := caches.Load(d); ok {
		c.(*Cache).Hold(on)
	}
}
