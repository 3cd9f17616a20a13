package scope

import (
	"context"
)

type scopeKey struct{}

// ctxScope is what a scope's Context carries: the scope, and what the
// context it was opened with carried, of whichever tree.
type ctxScope struct {
	s     Scope
	outer *ctxScope
}

// FromContext returns the scope that ctx was made by ([Scope.Context]). It
// may have ended since.
func FromContext(ctx context.Context) (Scope, bool) {
	e, ok := ctx.Value(scopeKey{}).(*ctxScope)
	if !ok {
		return Scope{}, false
	}
	return e.s, true
}
