package gpu

import (
	"errors"

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
	// ErrNoDevice: no such device, or no CUDA support in this build.
	ErrNoDevice = errors.New("gpu: no device")
	// ErrDeviceClosed: the device was closed.
	ErrDeviceClosed = errors.New("gpu: device closed")
)

// OOMError is the detail of a device out-of-memory error.
type OOMError = pool.OOMError

// LimitError is the detail of an allocation refused by a scope's limit.
type LimitError = scope.LimitError
