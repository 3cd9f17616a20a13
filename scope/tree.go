package scope

import (
	"context"
	"errors"
	"fmt"
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

// Pool returns the tree's pool.
func (t *Tree) Pool() *pool.Pool { return t.pool }

// Device returns the name of the tree's device.
func (t *Tree) Device() string { return t.device }

// RecordStacks turns recording of allocation and scope-opening stacks on or
// off for scopes and allocations made from now on.
func (t *Tree) RecordStacks(on bool) { t.recordStacks.Store(on) }

// Recording reports whether stacks are recorded.
func (t *Tree) Recording() bool { return t.recordStacks.Load() }

// Open opens a scope: a child of parent, or a root where parent is the
// zero Scope. With a zero parent, a scope of this tree that ctx carries
// (Scope.Context) is the parent. A ctx that is already done fails the open
// with its cause, and so does a parent that has ended.
func (t *Tree) Open(ctx context.Context, parent Scope, o Options) (Scope, error) {
	if ctx == nil {
		return Scope{}, errors.New("scope: nil Context")
	}
	if err := context.Cause(ctx); err != nil {
		return Scope{}, err
	}
	if o.Reserve < 0 || o.Reserve > pool.MaxSize || o.Limit < 0 {
		return Scope{}, fmt.Errorf("%w: reserve %d, limit %d", pool.ErrInvalidSize, o.Reserve, o.Limit)
	}
	if o.Limit > 0 && o.Reserve > o.Limit {
		return Scope{}, fmt.Errorf("scope: reserve %d exceeds the scope's limit %d", o.Reserve, o.Limit)
	}
	if o.Reserve > 0 && o.Stream != 0 {
		// A reservation is memory of one stream that its children share;
		// on a stream of its own, every allocation would be a use on
		// another stream. Refused rather than made slow.
		return Scope{}, errors.New("scope: a scope on a stream of its own cannot reserve memory")
	}
	if parent.IsZero() {
		// A context from a scope of this tree makes the new one its child.
		// Not only the innermost: between scopes of one device, ctx may
		// carry another device's (A, then B, then A again).
		for e, _ := ctx.Value(scopeKey{}).(*ctxScope); e != nil; e = e.outer {
			if e.s.n.tree == t {
				parent = e.s
				break
			}
		}
	}
	var pn *node
	if !parent.IsZero() {
		if parent.n.tree != t {
			return Scope{}, errors.New("scope: the parent belongs to another tree")
		}
		if !parent.lock() {
			return Scope{}, fmt.Errorf("%w: opening a scope in one that has ended", ErrClosed)
		}
		// Read the parent under its lock; adopt below checks it is open.
		pn = parent.n
		if o.Reserve > 0 && o.Stream == 0 && pn.stream != 0 {
			// Its allocations would go on the stream it inherits; the
			// reservation's memory, on the default stream, would return
			// there while that stream's work still used it.
			pn.mu.Unlock()
			return Scope{}, errors.New("scope: a scope on a stream, its own or its parent's, cannot reserve memory")
		}
	}
	if pn == nil && o.Reserve == 0 {
		// The common case, a root with no reservation: one critical
		// section takes the node and lists it.
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.closed {
			return Scope{}, ErrClosed
		}
		n := t.freeNode()
		t.setUp(n, ctx, nil, o)
		t.roots.push(n)
		return n.handle(), nil
	}
	t.mu.Lock()
	n := t.freeNode()
	t.mu.Unlock()
	t.setUp(n, ctx, pn, o)
	if pn != nil {
		pn.mu.Unlock()
	}
	path := n.path
	s := n.handle()
	if o.Reserve > 0 {
		// A reservation is memory taken: it counts against the limits of
		// the scope and every ancestor, as its allocations then do not.
		// Rounded as any allocation is, so that every size works.
		taken := pool.Rounded(o.Reserve)
		if err := n.charge(taken, nil); err != nil {
			t.discard(n)
			return Scope{}, fmt.Errorf("scope: reserving %s for scope %q: %w", pool.FormatBytes(o.Reserve), path, err)
		}
		a, err := t.pool.Alloc(taken)
		if err != nil {
			n.uncharge(taken, nil)
			t.discard(n)
			return Scope{}, fmt.Errorf("scope: reserving %s for scope %q: %w", pool.FormatBytes(o.Reserve), path, err)
		}
		r, err := pool.NewRegion(a.Ptr(), taken)
		if err != nil {
			n.uncharge(taken, nil)
			t.discard(n)
			return Scope{}, errors.Join(err, t.pool.Free(a))
		}
		n.resBlock, n.region = &a, r
	}
	var err error
	if pn != nil {
		err = parent.adopt(n)
	} else {
		t.mu.Lock()
		if t.closed {
			err = ErrClosed
		} else {
			t.roots.push(n)
		}
		t.mu.Unlock()
	}
	if err != nil {
		if n.region != nil {
			n.uncharge(pool.Rounded(o.Reserve), nil)
			err = errors.Join(err, t.pool.Free(*n.resBlock))
		}
		t.discard(n)
		return Scope{}, err
	}
	if n.region != nil {
		n.holds(nil) // the reservation holds
	}
	return s, nil
}

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

// setUp makes n the node of a new scope, child of pn (nil: a root), and
// opens it. The node is on no list and no handle names its new use yet:
// handles to its old uses fail their epoch check and read nothing else, so
// it is set up without its lock. pn's lock is held, where pn is not nil.
func (t *Tree) setUp(n *node, ctx context.Context, pn *node, o Options) {
	n.tree, n.parent, n.name, n.limit, n.id = t, pn, o.Name, o.Limit, nextID.Add(1)
	n.zeroed = o.Zeroed || pn != nil && pn.zeroed
	n.waits = o.Wait || pn != nil && pn.waits
	n.reserves = o.Reserve > 0 || pn != nil && pn.reserves
	n.stream = o.Stream
	if n.stream == 0 && pn != nil {
		n.stream = pn.stream
	}
	n.opened, n.done, n.ctx = ctx, ctx.Done(), nil
	n.stack = nil
	if t.recordStacks.Load() {
		n.stack = callers(4)
	}
	n.path = o.Name
	if n.path == "" {
		n.path = unnamed(n.id, n.stack)
	}
	if pn != nil {
		n.path = pn.path + "/" + n.path
	}
	if n.peak.Load() != 0 { // live is 0: everything was released
		n.peak.Store(0)
	}
	n.region, n.resBlock = nil, nil
	n.epoch.Add(1) // odd: open
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
		t.roots.remove(n)
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
