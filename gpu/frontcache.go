package gpu

import "github.com/gpuscope/gpuscope/internal/extcache"

// flushFront has the cache in front of the device's pool, where there is
// one (a C library's, through libgpuscope), give back what it holds, and
// reports whether it held anything: the device's figures then count what
// the library holds, and its pool has the room the library left.
func (d *Device) flushFront() bool { return extcache.Flush(d) }

// holdFront keeps the cache in front of the device's pool empty while on:
// a recording then sees every allocation.
func (d *Device) holdFront(on bool) { extcache.Hold(d, on) }
