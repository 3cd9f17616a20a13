package scope

import "context"

type scopeKey struct{}

// ctxScope is what a scope's Context carries: the scope, and what the
// context it was opened with carried, of whichever tree.
type ctxScope struct {
	s     Scope
	outer *ctxScope
}

// madeContext is the Context of a scope, made on its first call, with
// the use of the node (its epoch) it carries.
type madeContext struct {
	epoch uint64
	ctx   context.Context
}

// allocContext is the context a scope's allocations give the pool: the
// one the scope was opened with, and the scope's path, which the pool's
// observer (a device's recording) reads through ScopePath. A node holds
// its own, so that an allocation makes none.
type allocContext struct {
	context.Context
	n *node
}

// ScopePath returns the path of the scope that allocates, as its Summary
// and Snapshot name it.
func (c *allocContext) ScopePath() string { return c.n.pathName() }
