package scope

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/pool"
)

// Scope owns allocations; closing it releases them, last allocated first.
// A Scope is safe for use by many goroutines.
type Scope struct {
	tree     *Tree
	id       uint64
	parent   *Scope
	name     string
	path     string
	limit    int64
	zeroed   bool                            // allocations start zeroed (Options.Zeroed, here or above)
	waits    bool                            // allocations wait for memory (Options.Wait, here or above)
	opened   context.Context                 // the context it was opened with
	ctx      atomic.Pointer[context.Context] // opened with the scope in it, made on first use
	done     <-chan struct{}
	stack    []uintptr
	region   *pool.Region // the reservation, if any
	resBlock pool.Block   // the memory behind region

	closed atomic.Bool
	live   atomic.Int64 // bytes live here and in descendants
	peak   atomic.Int64

	mu         sync.Mutex // protects the fields below
	head, tail *Allocation
	count      int
	children   []*Scope
	spare      []*Allocation // slots ready for allocations (see slotTable)
}

// Stats describes a scope.
type Stats struct {
	Live        int64 // bytes live in the scope and its children
	Peak        int64 // the most Live has been
	Allocations int   // live allocations the scope owns itself
	Children    int   // open child scopes
	Reserved    int64 // bytes of its reservation
	Limit       int64 // its limit (0: none)
}

// ID returns a number no other scope of the process has.
func (s *Scope) ID() uint64 { return s.id }

// Name returns the scope's name; Path its ancestors' names and its own.
func (s *Scope) Name() string { return s.name }

// Path returns the names from the root to this scope, joined by "/".
func (s *Scope) Path() string { return s.path }

// Context returns a context that carries the scope, so that a scope opened
// with it is a child of this one. It is done when the context the scope was
// opened with is done.
func (s *Scope) Context() context.Context {
	if c := s.ctx.Load(); c != nil {
		return *c
	}
	c := context.WithValue(s.opened, scopeKey{}, s)
	if s.ctx.CompareAndSwap(nil, &c) {
		return c
	}
	return *s.ctx.Load()
}

// Stack returns where the scope was opened, when stacks were recorded.
func (s *Scope) Stack() []uintptr { return s.stack }

// Zeroed reports whether the scope's allocations are to start zeroed: it or
// an ancestor was opened with Options.Zeroed. Package scope only carries
// the flag; the device layer writes the zeros.
func (s *Scope) Zeroed() bool { return s.zeroed }

// WaitsForMemory reports whether the scope's allocations are to wait for
// memory rather than fail: it or an ancestor was opened with Options.Wait.
// Package scope only carries the flag; the device layer waits.
func (s *Scope) WaitsForMemory() bool { return s.waits }

// Closed reports whether the scope has ended.
func (s *Scope) Closed() bool { return s.closed.Load() }

// Stats returns the scope's counters.
func (s *Scope) Stats() Stats {
	s.mu.Lock()
	n, kids := s.count, len(s.children)
	s.mu.Unlock()
	st := Stats{Live: s.live.Load(), Peak: s.peak.Load(), Allocations: n, Children: kids, Limit: s.limit}
	if s.region != nil {
		st.Reserved = s.region.Size()
	}
	return st
}

// AllocationInfo is an allocation as Allocations saw it.
type AllocationInfo struct {
	Ref   Ref
	Ptr   uintptr
	Size  int64
	Stack []uintptr // where it was allocated, when stacks were recorded
}

// Allocations returns the live allocations the scope owns, oldest first,
// copied while the scope's lock is held: slots are reused, so what they
// hold can be read only then.
func (s *Scope) Allocations() []AllocationInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]AllocationInfo, 0, s.count)
	for a := s.head; a != nil; a = a.next {
		out = append(out, AllocationInfo{Ref: a.Ref(), Ptr: a.ptr, Size: a.size, Stack: a.stack})
	}
	return out
}

// Children returns the open child scopes, oldest first.
func (s *Scope) Children() []*Scope {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Scope(nil), s.children...)
}

// Alloc allocates size bytes owned by the scope: from the nearest
// reservation, its own or an ancestor's, with room, else from the device's
// pool. It fails once the scope is closed or its context is done. The
// allocation takes a slot of the tree's slot table, not a heap object of
// its own.
func (s *Scope) Alloc(size int64) (Ref, error) {
	if size <= 0 || size > pool.MaxSize {
		return Ref{}, fmt.Errorf("%w: %d bytes", pool.ErrInvalidSize, size)
	}
	if err := s.usable(); err != nil {
		return Ref{}, err
	}
	m := memory{size: size, taken: pool.Rounded(size)}
	for r := s; r != nil; r = r.parent {
		if r.region == nil {
			continue
		}
		if ptr, _, ok := r.region.Alloc(size); ok {
			m.ptr, m.region, m.resOf = ptr, r.region, r
			break
		}
	}
	// The memory is new to the scopes below the reservation that served it,
	// or, from the pool, to every scope up to the root: charge those.
	if err := s.charge(m.taken, m.resOf); err != nil {
		if m.region != nil {
			err = errors.Join(err, m.region.Free(m.ptr), m.resOf.releaseReservationIfEmpty())
		}
		return Ref{}, err
	}
	if m.region == nil {
		// Short of memory, the pool may wait for other streams' work; it
		// stops when the scope's context is done.
		b, err := s.tree.pool.AllocContext(s.opened, size, 0)
		if err != nil {
			s.uncharge(m.taken, nil)
			return Ref{}, fmt.Errorf("scope %q: %w", s.path, err)
		}
		m.ptr, m.block = b.Ptr(), b
	}
	var stack []uintptr
	if s.tree.record.Load() {
		stack = callers(3)
	}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		a := &Allocation{ptr: m.ptr, size: m.size, block: m.block, region: m.region, resOf: m.resOf}
		err := a.releaseMemory(s.tree)
		s.uncharge(m.taken, m.resOf)
		return Ref{}, errors.Join(fmt.Errorf("scope %q: %w", s.path, ErrClosed), err)
	}
	a := s.slot()
	a.ptr, a.size, a.taken, a.block, a.region, a.resOf, a.stack = m.ptr, m.size, m.taken, m.block, m.region, m.resOf, stack
	gen := nextGen(genOf(a.st.Load()))
	a.st.Store(word(gen, live))
	if a.owner.Load() != s {
		a.owner.Store(s)
	}
	s.link(a)
	s.mu.Unlock()
	return Ref{a: a, gen: gen, size: size}, nil
}

// memory is what an allocation holds, before it has a slot.
type memory struct {
	ptr         uintptr
	size, taken int64
	block       pool.Block
	region      *pool.Region
	resOf       *Scope
}

// slot returns a slot for a new allocation. Called with s.mu held.
func (s *Scope) slot() *Allocation {
	if len(s.spare) == 0 {
		s.spare = s.tree.slots.take(s.spare)
	}
	a := s.spare[len(s.spare)-1]
	s.spare = s.spare[:len(s.spare)-1]
	return a
}

// recycle makes the slot of an ended allocation ready for another, keeping
// its word: a stale Ref keeps failing as it did until the slot serves
// again. Called with s.mu held, after its memory went back.
func (s *Scope) recycle(a *Allocation) {
	a.ptr, a.size, a.taken, a.block, a.region, a.resOf, a.stack = 0, 0, 0, pool.Block{}, nil, nil, nil
	if s.closed.Load() {
		s.tree.slots.give([]*Allocation{a})
		return
	}
	s.spare = append(s.spare, a)
}

// releaseReservationIfEmpty returns the scope's reservation to the pool once
// the scope has closed and nothing is allocated from it; exactly one caller
// does it.
func (s *Scope) releaseReservationIfEmpty() error {
	if s.region == nil || !s.closed.Load() || !s.region.CloseIfEmpty() {
		return nil
	}
	s.uncharge(pool.Rounded(s.region.Size()), nil)
	if err := s.tree.pool.Free(s.resBlock); err != nil {
		return fmt.Errorf("scope %q: releasing its reservation: %w", s.path, err)
	}
	if s.tree.onFree != nil {
		s.tree.onFree()
	}
	return nil
}

// usable reports why the scope cannot allocate, if it cannot.
func (s *Scope) usable() error {
	if s.closed.Load() {
		return fmt.Errorf("scope %q: %w", s.path, ErrClosed)
	}
	select {
	case <-s.done:
		return fmt.Errorf("scope %q: %w", s.path, context.Cause(s.opened))
	default:
		return nil
	}
}

// charge counts size bytes against the scope and every ancestor, failing
// where a limit would be passed.
func (s *Scope) charge(size int64, stop *Scope) error {
	for a := s; a != stop; a = a.parent {
		n := a.live.Add(size)
		if a.limit > 0 && n > a.limit {
			for b := s; b != a.parent; b = b.parent {
				b.live.Add(-size)
			}
			return &LimitError{Path: a.path, Limit: a.limit, Live: n - size, Requested: size}
		}
		for n > a.peak.Load() {
			if p := a.peak.Load(); a.peak.CompareAndSwap(p, n) {
				break
			}
		}
	}
	return nil
}

// uncharge undoes charge(size, stop).
func (s *Scope) uncharge(size int64, stop *Scope) {
	for a := s; a != stop; a = a.parent {
		a.live.Add(-size)
	}
}

// link appends a to the list. Called with s.mu held.
func (s *Scope) link(a *Allocation) {
	a.prev, a.next = s.tail, nil
	if s.tail != nil {
		s.tail.next = a
	} else {
		s.head = a
	}
	s.tail = a
	s.count++
}

// unlink removes a from the list. Called with s.mu held.
func (s *Scope) unlink(a *Allocation) {
	if a.prev != nil {
		a.prev.next = a.next
	} else {
		s.head = a.next
	}
	if a.next != nil {
		a.next.prev = a.prev
	} else {
		s.tail = a.prev
	}
	a.prev, a.next = nil, nil
	s.count--
}

// take checks that s owns the allocation r names, live, and takes it off
// the list, marking it with state to. The state of the allocations on s's
// list changes only under s.mu, so that Close, Free and Keep agree on who
// ends each one. Called with s.mu held.
func (s *Scope) take(r Ref, to uint64) error {
	if r.IsZero() {
		return fmt.Errorf("%w: zero buffer", ErrWrongScope)
	}
	if err := r.err(); err != nil {
		return err
	}
	a := r.a
	switch o := a.owner.Load(); {
	case o == nil:
		return fmt.Errorf("%w: it is being kept by a parent scope", ErrWrongScope)
	case o.tree != s.tree:
		return fmt.Errorf("%w: it was allocated on another device", ErrWrongScope)
	case o != s:
		return fmt.Errorf("%w: owned by %q, freed through %q", ErrWrongScope, o.path, s.path)
	}
	if to != live && !a.mark(to) {
		panic("scope: bug: an allocation on a scope's list is not live")
	}
	s.unlink(a)
	if to == live {
		a.owner.Store(nil) // in transit: on no list
	}
	return nil
}

// Free releases a before the scope ends. Freeing twice, or through a scope
// that does not own it, is an error that changes nothing.
//
// Once Free has taken the allocation it is freed, whatever happens to its
// memory after: an error from giving memory back to the device (a driver
// that fails to free) says so, and the allocation is not to be freed again
// (a second Free is ErrFreed, as after any other).
func (s *Scope) Free(r Ref) error {
	s.mu.Lock()
	if err := s.take(r, freed); err != nil {
		s.mu.Unlock()
		return err
	}
	a := r.a
	taken, resOf := a.taken, a.resOf
	var err error
	if a.region == nil && s.tree.scrub == nil && a.st.Load()&usersMask == 0 {
		// The common case, done under the lock already held: nothing to
		// wait for, nothing slow before the memory goes back.
		err = a.releaseMemory(s.tree)
		s.recycle(a)
		s.mu.Unlock()
	} else {
		s.mu.Unlock()
		err = a.releaseMemory(s.tree)
		s.mu.Lock()
		s.recycle(a)
		s.mu.Unlock()
	}
	s.uncharge(taken, resOf)
	if err != nil {
		return fmt.Errorf("scope %q: the buffer of %d bytes is freed, but giving memory back failed: %w", s.path, r.size, err)
	}
	return nil
}

// Keep moves a to the parent scope, so that it outlives this one. It fails
// for a root scope, a closed parent, and memory in this scope's own
// reservation, which ends with the scope.
func (s *Scope) Keep(r Ref) error {
	p := s.parent
	if p == nil {
		return fmt.Errorf("%w: Keep in %q: a root scope has no parent", ErrNotKept, s.path)
	}
	s.mu.Lock()
	if err := s.take(r, live); err != nil {
		s.mu.Unlock()
		return err
	}
	a := r.a
	if a.resOf == s {
		a.owner.Store(s)
		s.link(a)
		s.mu.Unlock()
		return fmt.Errorf("%w: Keep in %q: the buffer lies in this scope's reservation, which ends with it", ErrNotKept, s.path)
	}
	s.mu.Unlock()
	p.mu.Lock()
	if !p.closed.Load() {
		a.owner.Store(p)
		p.link(a)
		p.mu.Unlock()
		s.live.Add(-a.taken) // the parent held it already, as s's ancestor
		return nil
	}
	p.mu.Unlock()
	err := fmt.Errorf("scope: Keep in %q: parent %w", s.path, ErrClosed)
	s.mu.Lock()
	if !s.closed.Load() {
		a.owner.Store(s)
		s.link(a)
		s.mu.Unlock()
		return err
	}
	// Both ended while a was between them: it ends here.
	a.mark(released)
	s.mu.Unlock()
	taken, resOf := a.taken, a.resOf
	rerr := a.releaseMemory(s.tree)
	s.tree.slots.give([]*Allocation{a})
	s.uncharge(taken, resOf)
	return errors.Join(err, rerr)
}

// adopt registers child c. It fails if s is closed.
func (s *Scope) adopt(c *Scope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return fmt.Errorf("scope: opening a scope in %q: %w", s.path, ErrClosed)
	}
	s.children = append(s.children, c)
	return nil
}

func (s *Scope) removeChild(c *Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range s.children {
		if k == c {
			s.children = append(s.children[:i], s.children[i+1:]...)
			return
		}
	}
}

// Close ends the scope: open children are closed first, then every
// allocation the scope still owns is released, last allocated first, and
// then its reservation. Release errors are joined; one never stops the
// rest. Close is idempotent.
func (s *Scope) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	s.mu.Lock()
	kids := append([]*Scope(nil), s.children...)
	s.mu.Unlock()
	for i := len(kids) - 1; i >= 0; i-- {
		if err := kids[i].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	ending := make([]*Allocation, 0, s.count) // last allocated first
	for a := s.tail; a != nil; a = a.prev {
		if !a.mark(released) {
			panic("scope: bug: an allocation on a scope's list is not live")
		}
		ending = append(ending, a)
	}
	for _, a := range ending {
		a.prev, a.next = nil, nil
	}
	s.head, s.tail, s.count = nil, nil, 0
	s.mu.Unlock()
	for _, a := range ending {
		err := a.releaseMemory(s.tree)
		s.uncharge(a.taken, a.resOf)
		if err != nil {
			errs = append(errs, fmt.Errorf("scope %q: releasing %d bytes at %#x: %w", s.path, a.size, a.ptr, err))
		}
		a.ptr, a.size, a.taken, a.block, a.region, a.resOf, a.stack = 0, 0, 0, pool.Block{}, nil, nil, nil
	}
	s.mu.Lock()
	spare := append(s.spare, ending...)
	s.spare = nil
	s.mu.Unlock()
	s.tree.slots.give(spare)
	// An allocation still in flight from the reservation (another goroutine
	// that took from it before the scope closed) releases it instead, when
	// it finds the scope closed.
	if err := s.releaseReservationIfEmpty(); err != nil {
		errs = append(errs, err) // only errors: an empty Close allocates nothing
	}
	if s.parent != nil {
		s.parent.removeChild(s)
	} else {
		s.tree.removeRoot(s)
	}
	return errors.Join(errs...)
}
