package scope

import "slices"

// TryEvict ends the scope if it is evictable and idle, and reports the
// bytes it held (its Live) and whether it ended. Idle means that nothing
// holds any of its allocations (a WithPtr whose fn runs, a RecordUse), no
// allocation, Free or Keep of it is under way, it has no child, and idle
// says that the work queued on the streams its allocations were used on
// has completed; one that holds no memory is not worth ending, and is left
// too. It never waits for the scope to become idle: a scope in use is left
// as it is, and TryEvict reports false.
//
// idle is called with no lock held, so that it may ask the driver: with
// the streams (its own first) and the count of the scope's latest use
// (Stats.LastUse), which names the work to ask about, that queued before
// that use ended. Should the scope be used after idle was asked, TryEvict
// leaves it. A nil idle asks nothing.
//
// Once the scope is found idle, and before anything changes, evicting is
// called with the scope's path (to cancel its context, say); then the
// scope ends as [Scope.End] ends it, except that a use of its allocations
// fails with the tree's TreeOptions.Evicted. The error is End's.
func (s Scope) TryEvict(idle func(lastUse uint64, streams []uintptr) bool, evicting func(path string)) (bytes int64, ok bool, err error) {
	n := s.n
	if n == nil || !n.mu.TryLock() {
		return 0, false, nil
	}
	if !n.mayEvict(s.epoch) {
		n.mu.Unlock()
		return 0, false, nil
	}
	since, streams := n.lastUse.Load(), n.usedOn()
	n.mu.Unlock()
	if idle != nil && !idle(since, streams) {
		return 0, false, nil
	}
	// A use that ended since idle was asked moved lastUse on; one under
	// way holds its allocation, which claimAllocations sees.
	if !n.mu.TryLock() {
		return 0, false, nil
	}
	if !n.mayEvict(s.epoch) || n.lastUse.Load() != since || !n.claimAllocations() {
		n.mu.Unlock()
		return 0, false, nil
	}
	bytes = n.live.Load()
	// Uses wait while the allocations are claimed: they see the scope
	// evicted only after evicting has run, and fail then.
	evicting(n.pathName())
	for x := n.allocs.head; x != nil; x = x.next {
		sl := x.elem
		sl.word.Store(packWord(genOf(sl.word.Load()), evicted))
	}
	_, err = n.end()
	return bytes, true, err
}

// mayEvict reports whether the scope open in n as epoch may be evicted,
// as far as its own state tells: evictable, holding memory, nothing in
// flight. Called with n.mu held.
func (n *node) mayEvict(epoch uint64) bool {
	e := n.epoch.Load()
	return e == epoch && e&1 == 1 && n.evictable && n.live.Load() > 0 && !n.inFlight()
}

// usedOn returns the streams that work on the scope's allocations may be
// queued on: its own first, then those that RecordUse or Keep named.
// Called with n.mu held.
func (n *node) usedOn() []uintptr {
	out := []uintptr{n.stream}
	if p := n.otherStreams.Load(); p != nil {
		out = append(out, *p...)
	}
	return out
}

// noteStream adds stream to the streams the evictable scope's allocations
// were used on, unless it is there already. Its callers hold an
// allocation of the scope, or its lock: the scope stays open meanwhile.
func (n *node) noteStream(stream uintptr) {
	for {
		p := n.otherStreams.Load()
		var old []uintptr
		if p != nil {
			old = *p
		}
		if stream == n.stream || slices.Contains(old, stream) {
			return
		}
		next := append(append(make([]uintptr, 0, len(old)+1), old...), stream)
		if n.otherStreams.CompareAndSwap(p, &next) {
			return
		}
	}
}

// claimAllocations claims every allocation of the scope (slot.claim), or
// none: it reports false, leaving them as they were, where one is held.
// Called with n.mu held.
func (n *node) claimAllocations() bool {
	for x := n.allocs.head; x != nil; x = x.next {
		if !x.elem.claim() {
			for y := n.allocs.head; y != x; y = y.next {
				y.elem.unclaim()
			}
			return false
		}
	}
	return true
}
