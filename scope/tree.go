package scope

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/spares"
	"github.com/gpuscope/gpuscope/pool"
)

// Tree holds the scopes of one device over its pool.
type Tree struct {
	pool         *pool.Pool
	device       string
	recordStacks atomic.Bool
	scrub        func(ptr uintptr, n int64, stream uintptr) error // TreeOptions.Scrub
	onRelease    func()                                           // TreeOptions.OnRelease
	recordingUse func()                                           // a test's: Ref.RecordUse calls it holding the allocation (SetRecordingUse)

	slots slotTable

	evicted error         // TreeOptions.Evicted
	clock   atomic.Uint64 // counts the uses of evictable scopes: Scope.LastUse orders them
	useMu   sync.Mutex    // with useDone: a release waits there for the last holder to leave
	useDone sync.Cond

	mu     sync.Mutex // protects roots, free and closed
	roots  scopeList
	free   spares.Stack[node] // nodes of ended scopes, to reuse
	closed bool
}

// TreeOptions are what a device asks of every release of its tree's memory.
type TreeOptions struct {
	// Scrub, if not nil, runs over memory before it goes back to the
	// reservation or the pool (a device that zeroes freed memory). It gets
	// the stream the memory's owner ordered its work on: the scrub is to be
	// queued there, after that work, since the memory is reused on that
	// stream at once.
	Scrub func(ptr uintptr, n int64, stream uintptr) error
	// OnRelease, if not nil, runs after memory went back, and after a Keep
	// moved memory out of a scope, whose Limit has room then (a device whose
	// allocations wait for memory). It must not call the tree.
	OnRelease func()
	// Evicted, if not nil, is the error a use of an allocation of a scope
	// that Scope.TryEvict ended fails with; without it, gpu.ErrScopeClosed.
	Evicted error
}

// NewTree returns an empty tree over p, for the device named device.
func NewTree(p *pool.Pool, device string, o TreeOptions) *Tree {
	t := &Tree{pool: p, device: device, scrub: o.Scrub, onRelease: o.OnRelease, evicted: cmp.Or(o.Evicted, errdefs.ScopeClosed)}
	t.useDone.L = &t.useMu
	return t
}

// RecordStacks turns recording of allocation and scope-opening stacks on or
// off for scopes and allocations made from now on.
func (t *Tree) RecordStacks(on bool) { t.recordStacks.Store(on) }

// Open opens a scope: a child of parent, or a root where parent is the
// zero Scope. With a zero parent, a scope of this tree that ctx carries
// (Scope.Context) is the parent. A ctx that is already done fails the open
// with its cause, and so does a parent that has ended.
func (t *Tree) Open(ctx context.Context, parent Scope, o Options) (Scope, error) {
	if ctx == nil {
		return Scope{}, prefixed.Errorf("scope", "nil Context")
	}
	if err := context.Cause(ctx); err != nil {
		return Scope{}, prefixed.Wrap("scope", err, "context done before the scope opened")
	}
	if err := o.check(); err != nil {
		return Scope{}, err
	}
	if parent.isZero() {
		parent = t.parentIn(ctx)
	}
	var stack []uintptr
	if t.recordStacks.Load() {
		stack = callerStack()
	}
	if parent.isZero() && o.Reserve == 0 {
		return t.openRoot(ctx, &o, stack)
	}
	var pn *node
	if !parent.isZero() {
		var err error
		if pn, err = parent.lockAsParent(t, o); err != nil {
			return Scope{}, err
		}
	}
	if o.Reserve == 0 {
		return t.openChild(ctx, pn, &o, stack), nil
	}
	return t.openReserved(ctx, parent, pn, &o, stack)
}

// parentIn returns the scope of this tree that ctx carries; the zero Scope
// where it carries none. Not only the innermost: between scopes of one
// device, ctx may carry another device's (A, then B, then A again).
func (t *Tree) parentIn(ctx context.Context) Scope {
	for e, _ := ctx.Value(scopeKey{}).(*ctxScope); e != nil; e = e.outer {
		if e.s.n.tree == t {
			return e.s
		}
	}
	return Scope{}
}

// openRoot opens a root scope with no reservation, the common case: one
// critical section takes the node and lists it.
func (t *Tree) openRoot(ctx context.Context, o *Options, stack []uintptr) (Scope, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return Scope{}, errTreeClosed
	}
	n := t.freeNode()
	n.setUp(ctx, nil, o, stack)
	t.roots.push(n, &n.siblings)
	return n.handle(), nil
}

// openChild opens a child of pn with no reservation, the common case for
// a child. It holds pn's lock, which lockAsParent took after checking that
// pn is open, from then until the child is listed among pn's children: pn
// cannot end between.
func (t *Tree) openChild(ctx context.Context, pn *node, o *Options, stack []uintptr) Scope {
	defer pn.mu.Unlock()
	t.mu.Lock()
	n := t.freeNode()
	t.mu.Unlock()
	n.setUp(ctx, pn, o, stack)
	pn.children.push(n, &n.siblings)
	return n.handle()
}

// openReserved opens a scope with a reservation: a child of pn, whose lock
// lockAsParent holds, or a root where pn is nil. The node is set up under
// pn's lock; the reservation is then taken from the pool outside it, and
// the scope listed after. Where a step fails, the parent (or the tree)
// having ended meanwhile included, undo gives back all it took. The
// reservation is charged to pn and its ancestors before the child is
// listed: pn's end waits until the open has finished (pn.opening), so that
// no other scope reuses pn's node while the open may still charge it.
func (t *Tree) openReserved(ctx context.Context, parent Scope, pn *node, o *Options, stack []uintptr) (Scope, error) {
	t.mu.Lock()
	n := t.freeNode()
	t.mu.Unlock()
	n.setUp(ctx, pn, o, stack)
	if pn != nil {
		pn.opening++
		pn.mu.Unlock()
		defer pn.openFinished()
	}
	s := n.handle()
	op := opening{tree: t, n: n}
	if err := op.reserve(o.Reserve); err != nil {
		return Scope{}, op.undo(err)
	}
	if err := t.attach(n, parent); err != nil {
		return Scope{}, op.undo(err)
	}
	n.raisePeaks(nil) // the reservation holds
	return s, nil
}

// attach lists the set-up node n: among parent's children, or the tree's
// roots where parent is the zero Scope. It fails where that one has ended.
func (t *Tree) attach(n *node, parent Scope) error {
	if !parent.isZero() {
		return parent.adopt(n)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errTreeClosed
	}
	t.roots.push(n, &n.siblings)
	return nil
}

// freeNode returns a node to open a scope in: one of an ended scope, or
// new. Called with t.mu held.
func (t *Tree) freeNode() *node {
	if n := t.free.Pop(); n != nil {
		return n
	}
	n := &node{tree: t} // a node serves scopes of one tree only: tree never changes
	n.left.L = &n.mu
	return n
}

// discard ends a node that never opened.
func (t *Tree) discard(n *node) {
	n.epoch.Add(1)
	if n.region == nil {
		t.mu.Lock()
		t.free.Push(n)
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
		t.free.Push(n)
	}
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
		for _, c := range s.children() {
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
		_, err := roots[i].End()
		errs = append(errs, err)
	}
	return leftOpen, errors.Join(errs...)
}

// nextID numbers scopes, so that a scope can be told apart from a later one
// at the same path.
var nextID atomic.Uint64
