package scope

import (
	"fmt"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
)

// The sentinels of the failures a scope reports are package gpu's, declared
// once (internal/errdefs): a scope's errors say "scope: " and the
// sentinel's text, and match gpu.ErrScopeClosed, gpu.ErrFreed,
// gpu.ErrWrongScope, gpu.ErrNotKept, gpu.ErrInvalidSize and
// gpu.ErrOutOfMemory.

// errTreeClosed is what opening a scope in a closed tree fails with.
var errTreeClosed = prefixed.Kind("scope", errdefs.ScopeClosed, "the tree was closed (Tree.Close)")

// LimitError reports an allocation that would take a scope past its limit.
// It is an out-of-memory error: errors.Is(err, gpu.ErrOutOfMemory).
type LimitError struct {
	Path      string // the path of the scope whose limit refused it
	Scope     Scope  // that scope
	Limit     int64
	Live      int64 // bytes live in that scope and its children
	Requested int64
}

// Error says what refused what, with no package's prefix: a LimitError
// reaches users through package gpu (gpu.LimitError), whose errors carry
// its prefix once.
func (e *LimitError) Error() string {
	return fmt.Sprintf("out of memory: the limit of scope %q (%s) refused %s: %s live in it",
		e.Path, units.FormatBytes(e.Limit), units.FormatBytes(e.Requested), units.FormatBytes(e.Live))
}

// Is makes a LimitError match gpu.ErrOutOfMemory.
func (e *LimitError) Is(target error) bool { return target == errdefs.OutOfMemory }
