package scope

import (
	"context"
	"errors"

	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
)

// opening is what Open has taken for a node that may yet fail to open, so
// that one undo gives it all back: the reservation's block and the bytes
// charged for it, which reserve records on the node as soon as the pool
// returns it.
type opening struct {
	tree *Tree
	n    *node
}

// newRegion makes a reservation's region over its block: pool.NewRegion,
// which a test replaces to fail the step after the pool's allocation.
var newRegion = pool.NewRegion

// reserve sets size bytes aside for the scope. A reservation is memory
// taken: it counts against the limits of the scope and every ancestor, as
// its allocations then do not. Rounded as any allocation is, so that every
// size works.
func (op *opening) reserve(size int64) error {
	n, p := op.n, op.n.pool
	if d := n.dom; d != nil {
		// Taken outside every scope's lock: a Sleep must not begin
		// meanwhile, and one that began refuses it.
		d.memMu.RLock()
		defer d.memMu.RUnlock()
		if d.asleep.Load() {
			return d.asleepError(n)
		}
	}
	// The pool's observer names the reserving scope, as for its allocations;
	// the pool rounds the size, and has it charged before it takes memory.
	c := poolCharge{n: n}
	b, err := p.AllocCharged(&allocContext{Context: context.Background(), n: n}, size, 0, c.charge)
	if err != nil {
		return prefixed.About(n.pathName(), "scope", err, "reserving %s for scope %q", units.FormatBytes(size), n.pathName())
	}
	n.reservationBlock, n.reserved = &b, c.charged // before any step that can fail: undo frees it
	r, err := newRegion(b.Ptr(), c.charged)
	if err != nil {
		return err
	}
	n.region = r
	return nil
}

// undo gives back what the open took and discards the node, returning err
// joined with any error from giving memory back.
func (op *opening) undo(err error) error {
	n := op.n
	if n.reservationBlock != nil {
		n.uncharge(n.reserved, nil)
		err = errors.Join(err, n.pool.Free(*n.reservationBlock))
	}
	op.tree.discard(n)
	return err
}
