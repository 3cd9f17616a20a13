// Package errdefs declares, once, the failures that more than one layer of
// gpuscope reports (pool, scope, the drivers, gpu): one sentinel each, in
// the words a user of package gpu reads. The layers re-export them by
// alias where their users need the name (gpu.ErrOutOfMemory is
// errdefs.OutOfMemory, as are pool.ErrOutOfMemory and the scope limit's
// refusal), so that errors.Is needs no table between layers. A layer
// wraps a sentinel with its own prefix ([prefixed.Kind]); package gpu
// says its prefix once over whatever crosses into it.
package errdefs

import (
	"errors"

	"github.com/gpuscope/gpuscope/internal/prefixed"
)

var (
	// OutOfMemory: the device, the pool's cap or a scope's limit has no room.
	OutOfMemory = prefixed.New("gpu", "out of memory")
	// InvalidSize: a size that is zero, negative or absurd, or a cap or
	// fraction out of range.
	InvalidSize = prefixed.New("gpu", "invalid size")
	// ScopeClosed: the scope has ended, or the buffer's scope has.
	ScopeClosed = prefixed.New("gpu", "scope closed")
	// Freed: the buffer was freed already.
	Freed = prefixed.New("gpu", "buffer already freed")
	// WrongScope: a buffer freed or kept through a scope that does not own it.
	WrongScope = prefixed.New("gpu", "buffer belongs to another scope")
	// NotKept: Keep in a root scope, or of a buffer in the scope's own
	// reservation, which ends with the scope.
	NotKept = prefixed.New("gpu", "buffer cannot be kept")
	// NoDevice: no such device, or no CUDA support in this build.
	NoDevice = prefixed.New("gpu", "no device")
	// Closed: the device, its driver or its pool was closed.
	Closed = prefixed.New("gpu", "device closed")
	// Asleep: the scope, or the buffer's scope, is asleep: its memory was
	// given back to the driver until it wakes.
	Asleep = prefixed.New("gpu", "scope asleep")
)

// IsSourceOutOfMemory reports whether err, from a pool's Source (a
// driver), means the device has no room: an error in its chain has a
// method OutOfMemory() bool that returns true (see pool.Source).
func IsSourceOutOfMemory(err error) bool {
	var o interface{ OutOfMemory() bool }
	return errors.As(err, &o) && o.OutOfMemory()
}

// IsStreamGone reports whether err, from a pool's EventSource (a driver),
// says a stream does not exist: an error in its chain has a method
// StreamGone() bool that returns true (see pool.EventSource).
func IsStreamGone(err error) bool {
	var g interface{ StreamGone() bool }
	return errors.As(err, &g) && g.StreamGone()
}
