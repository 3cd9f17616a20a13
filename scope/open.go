package scope

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/pool"
)

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
	if err := o.check(); err != nil {
		return Scope{}, err
	}
	if parent.IsZero() {
		parent = t.parentIn(ctx)
	}
	pn, err := t.lockParent(parent, o)
	if err != nil {
		return Scope{}, err
	}
	var stack []uintptr
	if t.recordStacks.Load() {
		stack = callerStack()
	}
	if pn == nil && o.Reserve == 0 {
		return t.openRoot(ctx, o, stack)
	}
	t.mu.Lock()
	n := t.freeNode()
	t.mu.Unlock()
	t.setUp(n, ctx, pn, o, stack)
	if pn != nil {
		pn.mu.Unlock()
	}
	s := n.handle()
	op := opening{tree: t, n: n}
	if o.Reserve > 0 {
		if err := op.reserve(o.Reserve); err != nil {
			return Scope{}, op.undo(err)
		}
	}
	if err := t.attach(n, parent); err != nil {
		return Scope{}, op.undo(err)
	}
	if n.region != nil {
		n.holds(nil) // the reservation holds
	}
	return s, nil
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

// lockParent locks the node of parent, where it is not the zero Scope, and
// returns it, after checking that a child with options o may open in it.
// On an error nothing is locked.
func (t *Tree) lockParent(parent Scope, o Options) (*node, error) {
	if parent.IsZero() {
		return nil, nil
	}
	if parent.n.tree != t {
		return nil, errors.New("scope: the parent belongs to another tree")
	}
	if !parent.lock() {
		return nil, fmt.Errorf("%w: opening a scope in one that has ended", ErrClosed)
	}
	// Read the parent under its lock; attach checks it is still open.
	pn := parent.n
	if o.Reserve > 0 && o.Stream == 0 && pn.stream != 0 {
		// Its allocations would go on the stream it inherits; the
		// reservation's memory, on the default stream, would return
		// there while that stream's work still used it.
		pn.mu.Unlock()
		return nil, errors.New("scope: a scope on a stream, its own or its parent's, cannot reserve memory")
	}
	return pn, nil
}

// openRoot opens a root scope with no reservation, the common case: one
// critical section takes the node and lists it.
func (t *Tree) openRoot(ctx context.Context, o Options, stack []uintptr) (Scope, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return Scope{}, ErrClosed
	}
	n := t.freeNode()
	t.setUp(n, ctx, nil, o, stack)
	t.roots.push(n, &n.siblings)
	return n.handle(), nil
}

// attach lists the set-up node n: among parent's children, or the tree's
// roots where parent is the zero Scope. It fails where that one has ended.
func (t *Tree) attach(n *node, parent Scope) error {
	if !parent.IsZero() {
		return parent.adopt(n)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	t.roots.push(n, &n.siblings)
	return nil
}

// opening is what Open has taken for a node that may yet fail to open, so
// that one undo gives it all back.
type opening struct {
	tree    *Tree
	n       *node
	charged int64       // bytes charged against the scope and its ancestors
	block   *pool.Block // the reservation's memory, once allocated
}

// reserve sets size bytes aside for the scope. A reservation is memory
// taken: it counts against the limits of the scope and every ancestor, as
// its allocations then do not. Rounded as any allocation is, so that every
// size works.
func (op *opening) reserve(size int64) error {
	n, p := op.n, op.tree.pool
	charged := pool.Rounded(size)
	if err := n.charge(charged, nil); err != nil {
		return fmt.Errorf("scope: reserving %s for scope %q: %w", pool.FormatBytes(size), n.path, err)
	}
	op.charged = charged
	b, err := p.Alloc(charged)
	if err != nil {
		return fmt.Errorf("scope: reserving %s for scope %q: %w", pool.FormatBytes(size), n.path, err)
	}
	op.block = &b
	r, err := pool.NewRegion(b.Ptr(), charged)
	if err != nil {
		return err
	}
	n.resBlock, n.region = &b, r
	return nil
}

// undo gives back what the open took and discards the node, returning err
// joined with any error from giving memory back.
func (op *opening) undo(err error) error {
	if op.charged > 0 {
		op.n.uncharge(op.charged, nil)
	}
	if op.block != nil {
		err = errors.Join(err, op.tree.pool.Free(*op.block))
	}
	op.tree.discard(op.n)
	return err
}

// setUp makes n the node of a new scope, child of pn (nil: a root), and
// opens it. The node is on no list and no handle names its new use yet:
// handles to its old uses fail their epoch check and read nothing else, so
// it is set up without its lock. pn's lock is held, where pn is not nil.
// stack is where it was opened, when stacks are recorded.
func (t *Tree) setUp(n *node, ctx context.Context, pn *node, o Options, stack []uintptr) {
	n.tree, n.parent, n.name, n.limit, n.id = t, pn, o.Name, o.Limit, nextID.Add(1)
	n.zeroed = o.Zeroed || pn != nil && pn.zeroed
	n.waits = o.Wait || pn != nil && pn.waits
	n.reserves = o.Reserve > 0 || pn != nil && pn.reserves
	n.stream = o.Stream
	if n.stream == 0 && pn != nil {
		n.stream = pn.stream
	}
	n.opened, n.done, n.ctx = ctx, ctx.Done(), nil
	n.stack = stack
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
