package scope

import (
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/pool"
)

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
		return fmt.Errorf("scope: reserving %s for scope %q: %w", pool.FormatBytes(size), n.pathName(), err)
	}
	op.charged = charged
	b, err := p.Alloc(charged)
	if err != nil {
		return fmt.Errorf("scope: reserving %s for scope %q: %w", pool.FormatBytes(size), n.pathName(), err)
	}
	op.block = &b
	r, err := pool.NewRegion(b.Ptr(), charged)
	if err != nil {
		return err
	}
	n.reservationBlock, n.region = &b, r
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
