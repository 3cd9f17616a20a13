package gpu

import (
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// Sentinel errors, for errors.Is. Richer detail travels in typed errors:
// [*pool.OOMError] for the device, [*scope.LimitError] for a scope's limit.
var (
	// ErrOutOfMemory: the device, or a scope's limit, has no room.
	ErrOutOfMemory = pool.ErrOutOfMemory
	// ErrInvalidSize: a size that is zero, negative or absurd.
	ErrInvalidSize = pool.ErrInvalidSize
	// ErrScopeClosed: the scope has ended, or the buffer's scope has.
	ErrScopeClosed = scope.ErrClosed
	// ErrFreed: the buffer was freed already.
	ErrFreed = scope.ErrFreed
	// ErrWrongScope: a buffer freed or kept through a scope that does not own it.
	ErrWrongScope = scope.ErrWrongScope
	// ErrNotKept: Keep in a root scope, or of a buffer in the scope's own
	// reservation, which ends with the scope.
	ErrNotKept = scope.ErrNotKept
	// ErrNoDevice: no such device, or no CUDA support in this build.
	ErrNoDevice = errors.New("gpu: no device")
	// ErrDeviceClosed: the device was closed. Its drivers return the same
	// error once closed.
	ErrDeviceClosed = driver.ErrClosed
)

// OOMError is the detail of a device out-of-memory error.
type OOMError = pool.OOMError

// LimitError is the detail of an allocation refused by a scope's limit.
type LimitError = scope.LimitError

// deviceError makes an error from the layers below say what it means in
// this package's words: the pool's "closed" is the device's.
func deviceError(err error) error {
	if err != nil && errors.Is(err, pool.ErrClosed) && !errors.Is(err, ErrDeviceClosed) {
		return fmt.Errorf("%w: %w", ErrDeviceClosed, err)
	}
	return err
}

// isOutOfMemory reports whether err means no room: the device's or a
// scope limit's.
func isOutOfMemory(err error) bool { return errors.Is(err, ErrOutOfMemory) }
