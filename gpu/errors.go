package gpu

import (
	"errors"
	"slices"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/scope"
)

// Sentinel errors, for errors.Is. Each failure has one sentinel, declared
// once for every layer that reports it (pool, scope and the drivers return
// these same errors, in their own words); richer detail travels in typed
// errors: [*OOMError] for an allocation that found no room, with its cause
// (a scope's [*LimitError], or the device's figures). An error of the
// layers below reaches a user of this package with its prefix, "gpu: ",
// once.
var (
	// ErrOutOfMemory: the device, or a scope's limit, has no room.
	ErrOutOfMemory = errdefs.OutOfMemory
	// ErrInvalidSize: a size that is zero, negative or absurd, or a copy
	// longer than its buffer or slice.
	ErrInvalidSize = errdefs.InvalidSize
	// ErrScopeClosed: the scope has ended, or the buffer's scope has.
	ErrScopeClosed = errdefs.ScopeClosed
	// ErrFreed: the buffer was freed already.
	ErrFreed = errdefs.Freed
	// ErrWrongScope: a buffer freed or kept through a scope that does not own it.
	ErrWrongScope = errdefs.WrongScope
	// ErrNotKept: Keep in a root scope, or of a buffer in the scope's own
	// reservation, which ends with the scope.
	ErrNotKept = errdefs.NotKept
	// ErrNoDevice: no such device, or no CUDA support in this build.
	ErrNoDevice = errdefs.NoDevice
	// ErrDeviceClosed: the device was closed. Its drivers (driver.ErrClosed)
	// and its pool return the same error once closed.
	ErrDeviceClosed = errdefs.Closed
	// ErrNotSupported: the device cannot do it (the host device runs no
	// kernels).
	ErrNotSupported = prefixed.New("gpu", "not supported by this device")
	// ErrEvicted: the scope was evicted to make room for another
	// allocation (see [Evictable]); the cause of its context, and what its
	// buffers fail with.
	ErrEvicted = prefixed.New("gpu", "scope evicted")
	// ErrAsleep: the scope, or the buffer's scope, is asleep (see
	// [Sleepable]): its memory went back to the driver until Wake. Every
	// use of a buffer asleep fails with it ([Scope.Sleep] lists them) but
	// [Scope.Free], which touches no memory and succeeds.
	ErrAsleep = errdefs.Asleep
)

// LimitError is the detail of an allocation refused by a scope's limit,
// the cause of an [*OOMError] whose Limit is set.
type LimitError = scope.LimitError

// crossedError is an error of the layers below (pool, scope, the drivers)
// or of this package, as a user of this package receives it: prefixed
// "gpu: " once, then the error's message without its own prefix. The
// sentinels are the same in every layer, so nothing is translated;
// nothing here reads a message (package prefixed keeps the prefixes apart
// from the texts).
type crossedError struct{ err error }

func (e *crossedError) Error() string { return "gpu: " + e.Text() }

// Text is the message without the prefix, for a layer above that wraps
// it (gputest).
func (e *crossedError) Text() string { return prefixed.Text(e.err) }

func (e *crossedError) Unwrap() error { return e.err }

// deviceError is err as a user of this package receives it: the errors of
// the layers below and this package's own, prefixed "gpu: " once
// ([crossedError]). Errors already crossed pass unchanged, and so do
// errors of other origin (a user's own, returned through Buffer.Use).
func deviceError(err error) error {
	if err == nil || !fromBelow(err) {
		return err
	}
	return &crossedError{err: err}
}

// fromBelow reports whether err is an error of gpuscope's layers still to
// be put under this package's prefix: one that knows its prefix
// (prefixed.Texter), a typed error of a layer below that has none
// (scope.LimitError, the drivers'), or errors.Join of errors some of which
// are.
func fromBelow(err error) bool {
	switch e := err.(type) {
	case *crossedError, *OOMError, *waitError:
		return false
	case prefixed.Texter, *scope.LimitError, *driver.OutOfMemoryError, *driver.NoStreamError:
		return true
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(e.Unwrap(), fromBelow)
	}
	return false
}

// isOutOfMemory reports whether err means no room: the device's or a
// scope limit's.
func isOutOfMemory(err error) bool { return errors.Is(err, ErrOutOfMemory) }
