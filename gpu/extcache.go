package gpu

import "github.com/gpuscope/gpuscope/internal/extcache"

// flushExternal has the device's external cache, one kept outside its pool
// where there is one (libgpuscope's pair cache), give back what it holds, and
// reports whether it held anything: the device's figures then count what
// the library holds, and its pool has the room the library left.
func (d *Device) flushExternal() bool { return extcache.Flush(d) }

// holdExternal keeps the device's external cache empty while on:
// a recording then sees every allocation.
func (d *Device) holdExternal(on bool) { extcache.Hold(d, on) }
