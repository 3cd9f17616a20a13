package scope

// TryEvict ends the scope if it is evictable and idle, and reports the
// bytes it held (its Live) and whether it ended. Idle means that nothing
// holds any of its allocations (a WithPtr whose fn runs, a RecordUse), no
// allocation, Free or Keep of it is under way, and it has no child; one
// that holds no memory is not worth ending, and is left too. It
// never waits for the scope to become idle: a scope in use is left as it
// is, and TryEvict reports false.
//
// Once the scope is found idle, and before anything changes, evicting is
// called with the scope's path (to cancel its context, say); then the
// scope ends as [Scope.End] ends it, except that a use of its allocations
// fails with the tree's TreeOptions.Evicted. The error is End's.
func (s Scope) TryEvict(evicting func(path string)) (bytes int64, ok bool, err error) {
	n := s.n
	if n == nil || !n.mu.TryLock() {
		return 0, false, nil
	}
	if e := n.epoch.Load(); e != s.epoch || e&1 == 0 || !n.evictable || n.live.Load() == 0 || n.inFlight() || !n.claimAllocations() {
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
