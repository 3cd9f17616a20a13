package scope

import (
	"context"
	"errors"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// Scope owns allocations; closing it releases them, last allocated first.
// A Scope is safe for use by many goroutines.
//
// A Scope is a small value, a handle to a node of the tree and the epoch
// of the node's use it names: nodes are reused once their scope ends, and
// every method of a Scope whose node has moved on acts as on a closed
// scope (gpu.ErrScopeClosed, zero stats), never on the scope that uses the node now.
// The zero Scope is closed.
type Scope struct {
	n      *node
	epoch  uint64
	zeroed bool // copies of the node's flags, which do not change during a use
	waits  bool
}

// lock locks the node and reports whether s still names its use; on false
// the node is unlocked.
func (s Scope) lock() bool {
	if s.n == nil {
		return false
	}
	s.n.mu.Lock()
	if e := s.n.epoch.Load(); e != s.epoch || e&1 == 0 {
		// Moved on, or ended: a list may still name a node whose scope
		// is ending, by a handle made after it began to.
		s.n.mu.Unlock()
		return false
	}
	return true
}

// isZero reports whether s is the zero Scope.
func (s Scope) isZero() bool { return s.n == nil }

// Path returns the names from the root to this scope, joined by "/"; ""
// once it ended.
func (s Scope) Path() string {
	if !s.lock() {
		return ""
	}
	defer s.n.mu.Unlock()
	return s.n.pathName()
}

// Context returns a context that carries the scope, so that a scope opened
// with it is a child of this one. It is done when the context the scope was
// opened with is done. Once the scope has ended it is a context already
// done with gpu.ErrScopeClosed as its cause: a scope opened from it fails. It never
// waits for the scope's lock, which an allocation holds while it waits for
// memory: a caller reading it meanwhile goes on.
func (s Scope) Context() context.Context {
	n := s.n
	if n == nil {
		return closedContext()
	}
	if c := n.made.Load(); c != nil && c.epoch == s.epoch && n.epoch.Load() == s.epoch {
		return c.ctx
	}
	// Counted as a reader, it reads opened without the lock: setUp, the
	// one writer, waits for readers before a new use's context goes in.
	n.readers.Add(1)
	defer n.readers.Add(-1)
	if e := n.epoch.Load(); e != s.epoch || e&1 == 0 {
		return closedContext()
	}
	outer, _ := n.opened.Value(scopeKey{}).(*ctxScope)
	c := &madeContext{epoch: s.epoch, ctx: context.WithValue(n.opened, scopeKey{}, &ctxScope{s: s, outer: outer})}
	for {
		old := n.made.Load()
		if old != nil && old.epoch == s.epoch {
			return old.ctx // another caller made it first: one context a use
		}
		if n.made.CompareAndSwap(old, c) {
			return c.ctx
		}
	}
}

// closedContext returns the Context of a scope that has ended.
func closedContext() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errdefs.ScopeClosed)
	return ctx
}

// Info returns what the scope is now, read in one look; false once it
// ended.
func (s Scope) Info() (Info, bool) {
	if !s.lock() {
		return Info{}, false
	}
	defer s.n.mu.Unlock()
	n := s.n
	var parent uint64
	if n.parent != nil {
		parent = n.parent.id
	}
	return Info{Scope: s, ID: n.id, Parent: parent, Name: n.name, Path: n.pathName(), Stack: n.stack, Stats: n.statsLocked(),
		Allocations: n.allocationsLocked(), Resources: n.resourcesLocked()}, true
}

// Inherited returns the options that hold for the scope's allocations
// because it or an ancestor was opened with them: Zeroed (they start
// zeroed) and Wait (they wait for memory rather than fail). Package scope
// only carries the flags; the device layer writes the zeros and waits.
func (s Scope) Inherited() Options { return Options{Zeroed: s.zeroed, Wait: s.waits} }

// Closed reports whether the scope has ended.
func (s Scope) Closed() bool {
	if s.n == nil {
		return true
	}
	e := s.n.epoch.Load()
	return e != s.epoch || e&1 == 0
}

// Stats returns the scope's counters; zero once it ended.
func (s Scope) Stats() Stats {
	if !s.lock() {
		return Stats{}
	}
	defer s.n.mu.Unlock()
	return s.n.statsLocked()
}

// children returns the open child scopes, oldest first.
func (s Scope) children() []Scope {
	if !s.lock() {
		return nil
	}
	defer s.n.mu.Unlock()
	return handles(&s.n.children)
}

// Alloc allocates size bytes owned by the scope: from the nearest
// reservation, its own or an ancestor's, with room, else from the device's
// pool. It fails once the scope is closed or its context is done. The
// allocation takes a slot of the tree's slot table, not a heap object of
// its own. The pool checks size (pool.AllocCharged), once: a size outside
// (0, pool.MaxSize] fails with ErrInvalidSize and takes nothing.
//
// The scope's lock is held throughout, so that the scope cannot end, nor
// its node serve another scope, while it allocates: the lock is the one
// that recording the allocation takes anyway.
func (s Scope) Alloc(size int64) (Ref, error) {
	if !s.lock() {
		return Ref{}, prefixed.Kind("scope", errdefs.ScopeClosed, "allocating through a scope that has ended")
	}
	defer s.n.mu.Unlock()
	r, err := s.n.allocLocked(size)
	if err == nil && s.n.tree.recordStacks.Load() {
		r.slot.stack = callerStack()
	}
	return r, err
}

// Free releases the allocation r names before the scope ends. Freeing
// twice, or through a scope that does not own it, is an error that changes
// nothing.
//
// An allocation of a sleepable scope asleep (Sleep) is freed too, as
// bookkeeping: its memory goes back to the domain's pool, free, unscrubbed
// (nothing is mapped under it), and the pool gives back to its source what
// then holds no allocation (see Sleep).
//
// Once Free has taken the allocation it is freed, whatever happens to its
// memory after: an error from giving memory back to the device (a driver
// that fails to free) says so, and the allocation is not to be freed again
// (a second Free is gpu.ErrFreed, as after any other).
func (s Scope) Free(r Ref) error {
	if !s.lock() {
		return prefixed.Kind("scope", errdefs.ScopeClosed, "Free through a scope that has ended")
	}
	n := s.n
	if err := n.detach(r, freed); err != nil {
		n.mu.Unlock()
		return err
	}
	sl := r.slot
	size := sl.size
	n.uncharge(sl.charged, sl.reservedIn)
	var err error
	if sl.region == nil && !n.freesAside && sl.word.Load()&usersMask == 0 {
		// The common case, done under the lock already held: nothing to
		// wait for, nothing slow before the memory goes back. (A
		// domain's release waits for its Sleep or Wake, which takes
		// this lock: outside it. freesAside says whether sl is in one:
		// its owner n is.)
		err = sl.releaseTo(n.tree, n.pool, true) // no holder: the word says none
		n.recycle(sl)
		n.mu.Unlock()
	} else {
		// Holders to wait for, or slow work: outside the lock. The scope
		// may begin to end meanwhile, so the slot goes back to the table;
		// its end waits for the release (releasing), which may uncharge
		// the scope's ancestors (the last release from a reservation).
		n.releasing++
		n.mu.Unlock()
		err = sl.releaseMemory(n.tree, true)
		sl.clear()
		n.tree.slots.give([]*slot{sl})
		n.releaseFinished()
	}
	if err != nil {
		return prefixed.Wrap("scope", err, "the buffer of %d bytes is freed, but giving memory back failed", size)
	}
	return nil
}

// Keep moves the allocation r names to the parent scope, so that it
// outlives this one; r stays valid. It fails for a root scope, a closed
// parent, and memory in this scope's own reservation, which ends with the
// scope.
func (s Scope) Keep(r Ref) error {
	if !s.lock() {
		return prefixed.Kind("scope", errdefs.ScopeClosed, "Keep through a scope that has ended")
	}
	n := s.n
	defer n.mu.Unlock()
	if err := r.err(); err != nil {
		return err
	}
	p := n.parent
	if p == nil {
		return prefixed.Kind("scope", errdefs.NotKept, "Keep in %q: a root scope has no parent", n.pathName())
	}
	if err := n.detach(r, live); err != nil {
		return err
	}
	sl := r.slot
	// stay gives the allocation back to n, where Keep cannot move it.
	stay := func(err error) error {
		sl.owner.Store(n)
		n.allocs.push(sl, &sl.link)
		return err
	}
	if sl.reservedIn == n {
		return stay(prefixed.Kind("scope", errdefs.NotKept, "Keep in %q: the buffer lies in this scope's reservation, which ends with it", n.pathName()))
	}
	if p.dom != n.dom {
		return stay(prefixed.Kind("scope", errdefs.NotKept, "Keep in %q: the buffer's memory sleeps and wakes with this scope, which it cannot leave", n.pathName()))
	}
	// A child's lock, then its parent's: no path takes them the other way.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed() {
		return stay(prefixed.Kind("scope", errdefs.ScopeClosed, "Keep in %q: its parent has ended", n.pathName()))
	}
	if n.dom != nil && n.dom.asleep.Load() {
		// Under the parent's lock: a Sleep that began has marked the
		// parent's allocations, or will mark this one there.
		return stay(n.dom.asleepError(n))
	}
	if p.stream != sl.stream.Load() {
		// The parent's work will use it on the parent's stream: the pool
		// must not reuse it on its own before that work is done. (Memory of
		// a reservation never gets here: a scope draws only on reservations
		// of its own stream, and so do the scopes between it and them.)
		if err := n.pool.RecordUse(sl.block, p.stream); err != nil {
			return stay(prefixed.Wrap("scope", err, "Keep in %q", n.pathName()))
		}
	}
	if p.evictable {
		// Work the child queued on the allocation keeps the parent busy
		// (see TryEvict), and the parent's set of allocations changed.
		p.noteStream(sl.stream.Load())
		p.lastUse.Store(n.tree.clock.Add(1))
	}
	sl.stream.Store(p.stream) // copies through the handle now go on the parent's stream
	if sl.touches.Load() != p.evictable {
		sl.touches.Store(p.evictable)
	}
	sl.owner.Store(p)
	p.allocs.push(sl, &sl.link)
	n.live.Add(-sl.charged) // the parent held it already, as n's ancestor
	if n.tree.onRelease != nil {
		n.tree.onRelease() // room under n's limit: allocations waiting for it may go on
	}
	return nil
}

// OwnResource makes the scope own r: when the scope ends, after its
// children, r.End is called (last owned first), then the scope's memory is
// released, then r.Final is called (last owned first). Work queued on a
// stream must complete in End for its memory to go back safely; what the
// release itself may queue on the stream (zeroing freed memory) must come
// before Final destroys it. It fails with gpu.ErrScopeClosed, calling nothing, once
// the scope has ended.
func (s Scope) OwnResource(r Resource) (Owned, error) {
	if r.End == nil && r.Final == nil {
		return Owned{}, prefixed.Errorf("scope", "OwnResource: no function")
	}
	if !s.lock() {
		return Owned{}, prefixed.Kind("scope", errdefs.ScopeClosed, "Own through a scope that has ended")
	}
	defer s.n.mu.Unlock()
	if r.Allocation {
		if err := s.n.usable(); err != nil {
			return Owned{}, err
		}
	}
	res := s.n.newResource(r)
	if s.n.tree.recordStacks.Load() {
		res.stack = callerStack()
	}
	return Owned{r: res, gen: res.state.Load() >> 1}, nil
}

// lockAsParent locks the node of s and returns it, after checking that a
// child of tree t with options o may open in s. On an error nothing is
// locked.
func (s Scope) lockAsParent(t *Tree, o Options) (*node, error) {
	if s.n.tree != t {
		return nil, prefixed.Errorf("scope", "the parent belongs to another tree")
	}
	if !s.lock() {
		return nil, prefixed.Kind("scope", errdefs.ScopeClosed, "opening a scope in one that has ended")
	}
	// Read the parent under its lock. A child without a reservation is
	// listed under this same hold; one with a reservation, after taking it
	// outside the lock, by attach, which checks the parent is still open.
	pn := s.n
	if o.Pool != nil && pn.dom != nil {
		pn.mu.Unlock()
		return nil, prefixed.Errorf("scope", "a scope with a pool of its own (a sleepable one) cannot open inside %q: its memory sleeps with %q already", pn.pathName(), pn.dom.root.pathName())
	}
	if o.Reserve > 0 && o.Stream == 0 && pn.stream != 0 {
		// Its allocations would go on the stream it inherits; the
		// reservation's memory, on the default stream, would return
		// there while that stream's work still used it.
		pn.mu.Unlock()
		return nil, prefixed.Errorf("scope", "a scope on a stream, its own or its parent's, cannot reserve memory")
	}
	return pn, nil
}

// adopt registers child c. It fails if s has ended.
func (s Scope) adopt(c *node) error {
	if !s.lock() {
		return prefixed.Kind("scope", errdefs.ScopeClosed, "opening a scope in one that has ended")
	}
	defer s.n.mu.Unlock()
	s.n.children.push(c, &c.siblings)
	return nil
}

// End ends the scope: open children are ended first, then every
// allocation the scope still owns is released, last allocated first, and
// then its reservation. Release errors are joined; one never stops the
// rest. End is idempotent: ending a scope that has ended does nothing.
// Where ending failed it also returns the scope's path, which a Scope that
// has ended no longer tells; "" where it ended cleanly or had ended
// already (an unnamed scope's path is made only when needed).
func (s Scope) End() (path string, err error) {
	if !s.lock() {
		return "", nil
	}
	return s.n.end()
}

// end is End for the scope open in n, called with n.mu held.
func (n *node) end() (path string, err error) {
	n.epoch.Add(1) // from now on every handle to it acts on an ended scope
	var errs []error
	if !n.inFlight() && n.resources.n == 0 && n.allocs.n == 0 {
		n.mu.Unlock() // an empty scope, the common case: no step to take
	} else {
		errs = n.endContents()
	}
	// An allocation still in flight from the reservation (another goroutine
	// that took from it before the scope closed) releases it instead, when
	// it finds the scope closed.
	if n.region != nil {
		if err := n.releaseReservationAtEnd(); err != nil {
			errs = append(errs, err) // only errors: an empty Close allocates nothing
		}
	}
	if len(errs) > 0 {
		path = n.pathName()
	}
	if n.parent != nil {
		n.parent.removeChild(n)
	}
	n.tree.retire(n)
	return path, errors.Join(errs...)
}
