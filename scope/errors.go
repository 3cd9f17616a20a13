package scope

import (
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/pool"
)

// Sentinel errors.
var (
	// ErrClosed: the scope, or the scope that owned an allocation, has ended.
	ErrClosed = errors.New("scope: closed")
	// ErrFreed: the allocation was freed already.
	ErrFreed = errors.New("scope: allocation already freed")
	// ErrWrongScope: the allocation belongs to another scope or device.
	ErrWrongScope = errors.New("scope: allocation belongs to another scope")
	// ErrNotKept: Keep cannot move the allocation to the parent: the scope
	// is a root, or the allocation lies in the scope's own reservation.
	ErrNotKept = errors.New("scope: allocation cannot be kept")
)

// LimitError reports an allocation that would take a scope past its limit.
// It is an out-of-memory error: errors.Is(err, pool.ErrOutOfMemory).
type LimitError struct {
	Path      string // the scope whose limit refused it
	Limit     int64
	Live      int64 // bytes live in that scope and its children
	Requested int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("scope: out of memory: %q limit %s: %s live, %s requested",
		e.Path, pool.FormatBytes(e.Limit), pool.FormatBytes(e.Live), pool.FormatBytes(e.Requested))
}

// Is makes a LimitError match pool.ErrOutOfMemory.
func (e *LimitError) Is(target error) bool { return target == pool.ErrOutOfMemory }
