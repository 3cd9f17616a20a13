package scope

type scopeKey struct{}

// ctxScope is what a scope's Context carries: the scope, and what the
// context it was opened with carried, of whichever tree.
type ctxScope struct {
	s     Scope
	outer *ctxScope
}
