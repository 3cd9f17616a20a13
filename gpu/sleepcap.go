package gpu

// A Sleepable scope's pool has the device's cap as its own MaxReserved,
// so that its budget (its cap, else the device's memory), which sizes the
// handles it creates, is the one the device's pool has: under a cap of 2.5
// to 32 GiB its large blocks grow in pages, and once memory was short
// every new handle is one (docs/pool.md, "Large blocks grow in pages").
// Without it the budget would be the device's whole memory, and a cap
// would only refuse the pool's pages (pageSource charges each to the
// device's pool) without shaping them. The pool's own cap refuses nothing
// the device's would not: what it holds, the device's pool counts too.
//
// The pool follows the cap awake only: a lower cap has a pool give back
// what it caches, and the pages of a pool asleep are no memory to give
// back. A scope asleep takes the cap as it wakes.

// capOf is the cap of d's pool as src's pool can hold it: 0 (none), or at
// least one of src's pages, the least a pool that maps pages accepts.
func capOf(d *Device, src *pageSource) int64 {
	c := d.pool.MaxReserved()
	if c <= 0 {
		return 0
	}
	return max(c, src.Granularity())
}

// followCap gives the pool the device's cap, where the scope is awake and
// has not ended. Called with mu held.
func (sl *sleeper) followCap() {
	sl.capStale.Store(false)
	if sl.ended || sl.sleeping.Load() {
		return // the scope's Wake follows it
	}
	c := capOf(sl.dev, sl.pages)
	if sl.pool.MaxReserved() == c {
		return
	}
	if err := sl.pool.SetMaxReserved(c); err != nil {
		sl.dev.dropped(err) // what the pool cached and could not give back
	}
}

// capChanged tells sl that the device's cap changed. The pool follows it
// now where mu is free, and otherwise as the holder of mu (a Sleep, a
// Wake, the scope's end, the device's calls on the pool) lets go of it:
// the device never waits for them, since a Wake holds mu while it calls
// OnOutOfMemory, which may set the cap.
func (sl *sleeper) capChanged() {
	sl.capStale.Store(true)
	sl.catchUp()
}

// catchUp has the pool follow a cap that changed while mu was held, where
// mu is free. A caller of capChanged that finds mu held has set capStale
// before it tried: the holder sees it once it lets go.
func (sl *sleeper) catchUp() {
	for sl.capStale.Load() && sl.mu.TryLock() {
		sl.followCap()
		sl.mu.Unlock()
	}
}

// unlock lets go of mu, then has the pool follow a cap that changed
// meanwhile. Every holder of mu lets go of it so.
func (sl *sleeper) unlock() {
	sl.mu.Unlock()
	sl.catchUp()
}

// capChanged tells every Sleepable scope of the device that its cap
// changed (SetMaxReserved, SetMaxReservedFraction).
func (ss *sleepers) capChanged() {
	for _, sl := range ss.all() {
		sl.capChanged()
	}
}
