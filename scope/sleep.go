package scope

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/pool"
)

// domain is a sleepable scope's (Options.Pool) and its descendants': the
// pool they all take memory from, and whether it is asleep. A node points
// to the domain it is in; the root's Sleep and Wake change the state of
// every allocation in it.
type domain struct {
	pool *pool.Pool
	root *node

	asleep atomic.Bool // its allocations are asleep: nothing may use or allocate its memory
	// memMu is held for writing while Sleep or Wake changes the domain's
	// memory, and for reading while an allocation's memory goes back to
	// the pool (slot.releaseMemory): no release scrubs memory being
	// unmapped, and none changes the pool while the memory changes.
	memMu sync.RWMutex
	// streams lists the streams besides its scopes' own that work on its
	// allocations was queued on (Ref.RecordUse), replaced whole.
	streams atomic.Pointer[[]uintptr]
}

// asleepError is the error of an allocation in n, whose domain is asleep.
func (d *domain) asleepError(n *node) error {
	if n == d.root {
		return prefixed.Kind("scope", errdefs.Asleep, "scope %q is asleep", n.pathName())
	}
	return prefixed.Kind("scope", errdefs.Asleep, "scope %q is asleep with %q", n.pathName(), d.root.pathName())
}

// noteStream adds stream to the streams the domain's allocations were
// used on, unless it is there already.
func (d *domain) noteStream(stream uintptr) {
	for {
		p := d.streams.Load()
		var old []uintptr
		if p != nil {
			old = *p
		}
		if slices.Contains(old, stream) {
			return
		}
		next := append(slices.Clone(old), stream)
		if d.streams.CompareAndSwap(p, &next) {
			return
		}
	}
}

// Sleep makes every allocation of the scope and of the scopes inside it
// unusable, and calls fn, which is to give the memory under them back: a
// use (WithPtr, Ptr, RecordUse, Keep) fails with gpu.ErrAsleep from then
// on, and so do allocations and reservations in them, until Wake. A Free
// succeeds, touching no memory: the allocation's memory goes back to the
// domain's pool as free, and the pool gives back to its source what then
// holds no allocation (EmptyCache), as the end of a scope inside it
// asleep does; the pool's source is to take that as bookkeeping, the
// memory being given back already.
// The scope must have been opened with a pool of its own
// (Options.Pool). Before it calls fn it waits for the holders of the
// allocations to leave (a WithPtr whose fn runs), as the scope's end
// does: Sleep must not be called from inside one. fn gets the streams
// that work on the allocations may be queued on: each scope's own, and
// those RecordUse named.
//
// Where fn fails, every allocation is usable again and Sleep returns fn's
// error. A scope asleep already fails with gpu.ErrAsleep, one that has
// ended with gpu.ErrScopeClosed, calling nothing. The allocations' releases
// (a scope's end, a Free that was under way) wait while fn runs, and those
// of a domain asleep leave its memory untouched: its scopes end while
// asleep.
func (s Scope) Sleep(fn func(streams []uintptr) error) error {
	d, err := s.domainRoot("Sleep")
	if err != nil {
		return err
	}
	d.memMu.Lock()
	defer d.memMu.Unlock()
	if s.Closed() {
		return prefixed.Kind("scope", errdefs.ScopeClosed, "Sleep: the scope has ended")
	}
	if d.asleep.Load() {
		return prefixed.Kind("scope", errdefs.Asleep, "Sleep: scope %q is asleep already", s.Path())
	}
	d.asleep.Store(true) // before any mark: allocations and Keeps that come after see it
	var marked []*slot
	streams := d.walk(s, func(sl *slot) {
		if sl.mark(asleep) {
			marked = append(marked, sl)
		}
	})
	// The streams RecordUse named, read once the holders have left: a
	// RecordUse that took an allocation before the mark notes its stream
	// before it leaves, and none takes one after.
	s.n.tree.waitForHolders(marked)
	if p := d.streams.Load(); p != nil {
		for _, st := range *p {
			if !slices.Contains(streams, st) {
				streams = append(streams, st)
			}
		}
	}
	if err := fn(streams); err != nil {
		d.walk(s, func(sl *slot) { sl.markFrom(asleep, live) })
		d.asleep.Store(false)
		return err
	}
	return nil
}

// Wake calls fn, which is to map the memory of the scope's domain again,
// where the scope is asleep (Sleep), and makes its allocations usable once
// fn succeeds. Where fn fails, it returns fn's error and the scope stays
// asleep. A scope that is awake calls nothing and returns nil; one that
// has ended fails with gpu.ErrScopeClosed.
func (s Scope) Wake(fn func() error) error {
	d, err := s.domainRoot("Wake")
	if err != nil {
		return err
	}
	d.memMu.Lock()
	defer d.memMu.Unlock()
	if s.Closed() {
		return prefixed.Kind("scope", errdefs.ScopeClosed, "Wake: the scope has ended")
	}
	if !d.asleep.Load() {
		return nil
	}
	if err := fn(); err != nil {
		return err
	}
	d.walk(s, func(sl *slot) { sl.markFrom(asleep, live) })
	d.asleep.Store(false)
	return nil
}

// giveBackAsleep gives back to the source of the domain's pool what the
// pool holds free, where the domain is asleep: memory released asleep (by
// the end of a scope inside it, as by a Free, slot.releaseToDomain) is
// worth nothing cached, and Wake would take again the pages it holds.
// Awake it does nothing: the pool caches as any.
func (d *domain) giveBackAsleep() error {
	d.memMu.RLock()
	defer d.memMu.RUnlock()
	if !d.asleep.Load() {
		return nil
	}
	return d.pool.EmptyCache()
}

// releaseReservationAtEnd is releaseReservationIfEmpty at the end of the
// scope open in n. A reservation in a domain goes back as its
// allocations' memory does (slot.releaseToDomain): while no Sleep or Wake
// changes the domain's memory, and then from the pool to its source where
// the domain is asleep. n has a reservation.
func (n *node) releaseReservationAtEnd() error {
	d := n.dom
	if d == nil {
		return n.releaseReservationIfEmpty()
	}
	d.memMu.RLock()
	defer d.memMu.RUnlock()
	err := n.releaseReservationIfEmpty()
	if d.asleep.Load() {
		err = errors.Join(err, d.pool.EmptyCache())
	}
	return err
}

// domainRoot returns the domain of the scope, which must be its root:
// opened with a pool of its own.
func (s Scope) domainRoot(op string) (*domain, error) {
	if !s.lock() {
		return nil, prefixed.Kind("scope", errdefs.ScopeClosed, "%s: the scope has ended", op)
	}
	defer s.n.mu.Unlock()
	if d := s.n.dom; d != nil && d.root == s.n {
		return d, nil
	}
	return nil, prefixed.Errorf("scope", "%s: scope %q was not opened with a pool of its own", op, s.n.pathName())
}

// walk calls fn for each allocation of the domain's scopes, under its
// scope's lock, parents before children, and returns the streams the
// scopes order their work on. Called with memMu held for writing. root
// is the handle Sleep or Wake was called on, not one made from d.root:
// the root may end meanwhile (while fn runs; an empty one waits for no
// memMu) and its node serve another scope, whose allocations are not
// d's.
func (d *domain) walk(root Scope, fn func(sl *slot)) (streams []uintptr) {
	var visit func(s Scope)
	visit = func(s Scope) {
		if !s.lock() {
			return // it ended: its allocations are released, or will be
		}
		n := s.n
		if !slices.Contains(streams, n.stream) {
			streams = append(streams, n.stream)
		}
		for x := n.allocs.head; x != nil; x = x.next {
			fn(x.elem)
		}
		kids := handles(&n.children)
		n.mu.Unlock()
		for _, k := range kids {
			visit(k)
		}
	}
	visit(root)
	return streams
}

// waitForHolders waits until no caller holds any of slots (between
// acquire and leave): their state is no longer live, so that none comes.
func (t *Tree) waitForHolders(slots []*slot) {
	for _, sl := range slots {
		t.waitForHolder(sl)
	}
}
