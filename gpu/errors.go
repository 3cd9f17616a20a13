package gpu

import (
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// Sentinel errors, for errors.Is. Richer detail travels in typed errors:
// [*OOMError] for the device, [*LimitError] for a scope's limit. Errors
// from the layers below (pool, scope) keep their own words and prefix;
// where they cross into this package they also match these sentinels.
var (
	// ErrOutOfMemory: the device, or a scope's limit, has no room.
	ErrOutOfMemory = errors.New("gpu: out of memory")
	// ErrInvalidSize: a size that is zero, negative or absurd.
	ErrInvalidSize = errors.New("gpu: invalid size")
	// ErrScopeClosed: the scope has ended, or the buffer's scope has.
	ErrScopeClosed = errors.New("gpu: scope closed")
	// ErrFreed: the buffer was freed already.
	ErrFreed = errors.New("gpu: buffer already freed")
	// ErrWrongScope: a buffer freed or kept through a scope that does not own it.
	ErrWrongScope = errors.New("gpu: buffer belongs to another scope")
	// ErrNotKept: Keep in a root scope, or of a buffer in the scope's own
	// reservation, which ends with the scope.
	ErrNotKept = errors.New("gpu: buffer cannot be kept")
	// ErrNoDevice: no such device, or no CUDA support in this build.
	ErrNoDevice = errors.New("gpu: no device")
	// ErrDeviceClosed: the device was closed. Its drivers return the same
	// error once closed.
	ErrDeviceClosed = driver.ErrClosed
	// ErrNotSupported: the device cannot do it (the host device runs no
	// kernels).
	ErrNotSupported = errors.New("gpu: not supported by this device")
)

// OOMError is the detail of a device out-of-memory error.
type OOMError = pool.OOMError

// LimitError is the detail of an allocation refused by a scope's limit.
type LimitError = scope.LimitError

// lowerSentinels pairs the errors of the layers below with this package's.
var lowerSentinels = [...]struct{ lower, own error }{
	{pool.ErrOutOfMemory, ErrOutOfMemory},
	{pool.ErrInvalidSize, ErrInvalidSize},
	{scope.ErrClosed, ErrScopeClosed},
	{scope.ErrFreed, ErrFreed},
	{scope.ErrWrongScope, ErrWrongScope},
	{scope.ErrNotKept, ErrNotKept},
}

// crossedError is an error from a layer below, as it reaches a user of this
// package: the same message, and it also matches this package's sentinel.
type crossedError struct {
	err error
	own error
}

func (e *crossedError) Error() string        { return e.err.Error() }
func (e *crossedError) Unwrap() error        { return e.err }
func (e *crossedError) Is(target error) bool { return target == e.own }

// deviceError puts an error from the layers below in this package's terms:
// the pool's "closed" is the device's, and the pool's and scope's
// sentinels match this package's. Errors already in these terms, and
// errors of other origin, pass unchanged.
func deviceError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pool.ErrClosed) && !errors.Is(err, ErrDeviceClosed) {
		return fmt.Errorf("%w: %w", ErrDeviceClosed, err)
	}
	for _, p := range lowerSentinels {
		if errors.Is(err, p.lower) {
			if errors.Is(err, p.own) {
				return err
			}
			return &crossedError{err: err, own: p.own}
		}
	}
	return err
}

// isOutOfMemory reports whether err means no room: the device's or a
// scope limit's, before or after deviceError.
func isOutOfMemory(err error) bool { return errors.Is(err, pool.ErrOutOfMemory) }
