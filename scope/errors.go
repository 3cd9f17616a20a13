package scope

import (
	"fmt"

	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
)

// LimitError reports an allocation that would take a scope past its limit.
// It is an out-of-memory error: errors.Is(err, pool.ErrOutOfMemory).
type LimitError struct {
	Path      string // the path of the scope whose limit refused it
	Scope     Scope  // that scope
	Limit     int64
	Live      int64 // bytes live in that scope and its children
	Requested int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("scope: out of memory: %q limit %s: %s live, %s requested",
		e.Path, units.FormatBytes(e.Limit), units.FormatBytes(e.Live), units.FormatBytes(e.Requested))
}

// Is makes a LimitError match pool.ErrOutOfMemory.
func (e *LimitError) Is(target error) bool { return target == pool.ErrOutOfMemory }
