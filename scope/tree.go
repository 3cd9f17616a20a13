package scope

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/pool"
)

// Tree holds the scopes of one device over its pool.
type Tree struct {
	pool         *pool.Pool
	device       string
	recordStacks atomic.Bool
	scrub        func(ptr uintptr, n int64, stream uintptr) error // run on memory before it goes back; set before use
	onFree       func()                                           // run after memory went back; set before use

	slots slotTable

	useMu   sync.Mutex // with useDone: a release waits there for the last running Use
	useDone sync.Cond

	mu     sync.Mutex // protects roots, free and closed
	roots  scopeList
	free   []*node // nodes of ended scopes, to reuse
	closed bool
}

// SetScrub makes every release run fn over the memory first, before it goes
// back to the reservation or the pool (a device that zeroes freed memory).
// fn gets the stream the memory's owner ordered its work on: the scrub is
// to be queued there, after that work, since the memory is reused on that
// stream at once. Call it before the first scope opens.
func (t *Tree) SetScrub(fn func(ptr uintptr, n int64, stream uintptr) error) { t.scrub = fn }

// OnRelease makes every release of memory call fn after the memory went
// back (a device whose allocations wait for memory). Call it before the
// first scope opens.
func (t *Tree) OnRelease(fn func()) { t.onFree = fn }

// NewTree returns an empty tree over p, for the device named device.
func NewTree(p *pool.Pool, device string) *Tree {
	t := &Tree{pool: p, device: device}
	t.useDone.L = &t.useMu
	return t
}

// Device returns the name of the tree's device.
func (t *Tree) Device() string { return t.device }

// RecordStacks turns recording of allocation and scope-opening stacks on or
// off for scopes and allocations made from now on.
func (t *Tree) RecordStacks(on bool) { t.recordStacks.Store(on) }

// freeNode returns a node to open a scope in: one of an ended scope, or
// new. Called with t.mu held.
func (t *Tree) freeNode() *node {
	if k := len(t.free); k > 0 {
		n := t.free[k-1]
		t.free[k-1] = nil
		t.free = t.free[:k-1]
		return n
	}
	n := &node{}
	n.left.L = &n.mu
	return n
}

// discard ends a node that never opened.
func (t *Tree) discard(n *node) {
	n.epoch.Add(1)
	if n.region == nil {
		t.mu.Lock()
		t.free = append(t.free, n)
		t.mu.Unlock()
	}
}

// retire takes an ended scope's node off the roots and makes it ready for
// another scope: every Scope naming its use so far acts on an ended scope
// from now on. A node with a reservation is not reused: an allocation still
// in flight may hold it (see releaseReservationIfEmpty).
func (t *Tree) retire(n *node) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n.parent == nil {
		t.roots.remove(&n.siblings)
	}
	if n.region == nil {
		t.free = append(t.free, n)
	}
}

// Roots returns the open root scopes, oldest first; their children are
// Scope.Children.
func (t *Tree) Roots() []Scope {
	t.mu.Lock()
	defer t.mu.Unlock()
	return handles(&t.roots)
}

// Scopes returns every open scope, parents before children. A scope may
// end right after: read it with Scope.Info.
func (t *Tree) Scopes() []Scope {
	t.mu.Lock()
	roots := handles(&t.roots)
	t.mu.Unlock()
	var out []Scope
	var walk func(s Scope)
	walk = func(s Scope) {
		out = append(out, s)
		for _, c := range s.Children() {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

// Close closes every open scope, releasing its memory, and refuses new
// root scopes. It returns the paths of the scopes it had to close.
func (t *Tree) Close() (leftOpen []string, err error) {
	t.mu.Lock()
	t.closed = true
	roots := handles(&t.roots)
	t.mu.Unlock()
	var errs []error
	for i := len(roots) - 1; i >= 0; i-- {
		if path := roots[i].Path(); path != "" {
			leftOpen = append(leftOpen, path)
		}
		errs = append(errs, roots[i].Close())
	}
	return leftOpen, errors.Join(errs...)
}

// nextID numbers scopes, so that a scope can be told apart from a later one
// at the same path.
var nextID atomic.Uint64
