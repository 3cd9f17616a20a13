package scope

import (
	"fmt"

	"github.com/gpuscope/gpuscope/internal/prefixed"
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

func (e *LimitError) Error() string { return "scope: " + e.Text() }

// Text is the message without the package's prefix, for a layer above
// that wraps it.
func (e *LimitError) Text() string {
	return fmt.Sprintf("out of memory: %q limit %s: %s live, %s requested",
		e.Path, units.FormatBytes(e.Limit), units.FormatBytes(e.Live), units.FormatBytes(e.Requested))
}

// Is makes a LimitError match pool.ErrOutOfMemory.
func (e *LimitError) Is(target error) bool { return target == pool.ErrOutOfMemory }

// ReserveError is a reservation a new scope could not make ([Options]
// Reserve): the scope did not open. Err says why: an ancestor's
// *LimitError, the pool's out-of-memory error, or another of the pool's.
type ReserveError struct {
	Path string // the path the scope would have had
	Size int64  // the bytes it asked to reserve
	Err  error
}

func (e *ReserveError) Error() string { return "scope: " + e.Text() }

// Text is the message without the package's prefix, for a layer above
// that wraps it.
func (e *ReserveError) Text() string {
	return fmt.Sprintf("reserving %s for scope %q: %s", units.FormatBytes(e.Size), e.Path, prefixed.Text(e.Err))
}

// Unwrap returns why the reservation failed.
func (e *ReserveError) Unwrap() error { return e.Err }
