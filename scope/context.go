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
