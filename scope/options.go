package scope

import (
	"fmt"

	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/pool"
)

// Options configure a scope when it opens.
type Options struct {
	Name      string  // for diagnostics; its path is its ancestors' names and its own, joined by "/"
	Reserve   int64   // bytes to set aside for the scope and its children (0: none)
	Limit     int64   // most bytes live in the scope and its children (0: none)
	Zeroed    bool    // its allocations, and its children's, are to start zeroed (see Scope.Inherited)
	Wait      bool    // its allocations, and its children's, wait for memory (see Scope.Inherited)
	Stream    uintptr // its allocations, and its children's, are ordered on this stream (0: the parent's, or the default stream)
	Evictable bool    // its uses are counted (Scope.LastUse) and Scope.TryEvict may end it; not inherited
	// Pool, if not nil, is where the scope and the scopes inside it take
	// their memory, instead of the tree's pool: a sleepable domain, which
	// Scope.Sleep and Scope.Wake put to sleep and wake whole, and which no
	// allocation leaves (Keep stops at it) and no reservation outside it
	// serves. The caller makes the pool and closes it after the scope has
	// ended. It cannot be given inside another domain.
	Pool *pool.Pool
}

// check reports options that no scope can open with. Options that reserve
// nothing and have no negative limit always can: the common case costs
// Open one test, inlined. Sizes are checked where users give them
// (package gpu): a Reserve or Limit out of range here is a bug of the
// caller, and panics.
func (o Options) check() error {
	if o.Reserve == 0 && o.Limit >= 0 {
		return nil
	}
	return o.checkReserve()
}

// checkReserve is check for options that reserve memory or have a
// negative limit.
func (o Options) checkReserve() error {
	if o.Reserve < 0 || o.Reserve > pool.MaxSize || o.Limit < 0 || o.Limit > 0 && o.Reserve > o.Limit {
		panic(fmt.Sprintf("scope: bug: Open with Reserve %d and Limit %d: sizes are checked where users give them (package gpu)", o.Reserve, o.Limit))
	}
	if o.Reserve > 0 && o.Stream != 0 {
		// A reservation is memory of one stream that its children share;
		// on a stream of its own, every allocation would be a use on
		// another stream. Refused rather than made slow.
		return prefixed.Errorf("scope", "a scope on a stream of its own cannot reserve memory")
	}
	return nil
}
