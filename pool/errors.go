package pool

import (
	"fmt"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
)

// Sentinel errors, for errors.Is. All but ErrInvalidBlock are package
// gpu's, declared once (internal/errdefs) for every layer that reports the
// failure: pool.ErrOutOfMemory is gpu.ErrOutOfMemory, so a pool's user
// and a gpu's test the same sentinel. The errors the pool returns say
// "pool: " and the sentinel's text.
var (
	// ErrOutOfMemory means the source could not provide the memory, even
	// after the pool released what it caches, or the cap refused it. The
	// error also is an *OOMError.
	ErrOutOfMemory = errdefs.OutOfMemory
	// ErrInvalidSize means a size that is zero, negative, or larger than
	// any device could hold (MaxSize), or a cap or option out of range.
	ErrInvalidSize = errdefs.InvalidSize
	// ErrClosed means the pool was closed: [Pool.Close] makes later
	// allocations fail with it. It is gpu's ErrDeviceClosed.
	ErrClosed = errdefs.Closed
	// ErrInvalidBlock means a Block that this pool did not hand out, one
	// that was already freed (a double free), or the zero Block.
	ErrInvalidBlock = prefixed.New("pool", "invalid block")
)

// errClosed is ErrClosed in the pool's words.
var errClosed = prefixed.Kind("pool", ErrClosed, "")

// OOMError describes an allocation the pool could not satisfy.
type OOMError struct {
	Requested   int64   // bytes asked for
	Stream      uintptr // stream the allocation was for
	Allocated   int64   // bytes in live blocks when it failed
	Reserved    int64   // bytes the pool held from the source
	Limit       int64   // the pool's limit in bytes (0: none)
	DeviceFree  int64   // free bytes the source reported (-1: unknown)
	DeviceTotal int64   // total bytes the source reported (-1: unknown)
	LargestFree int64   // largest free block the pool caches
	Page        int64   // the pool reserves whole pages of this size: a cap holds as many as fit under it
	Err         error   // what the source said, or nil when the limit refused it
}

func (e *OOMError) Error() string { return "pool: " + e.Text() }

// Text is the message without the package's prefix, for a layer above
// that wraps it.
func (e *OOMError) Text() string {
	msg := fmt.Sprintf("out of memory: tried to allocate %s; %s allocated, %s reserved, largest free block %s",
		units.FormatBytes(e.Requested), units.FormatBytes(e.Allocated), units.FormatBytes(e.Reserved), units.FormatBytes(e.LargestFree))
	if e.Limit > 0 {
		msg += fmt.Sprintf(", limit %s", units.Precise(e.Limit))
		if e.Page > 0 {
			msg += fmt.Sprintf(" in whole pages of %s", units.FormatBytes(e.Page))
		}
	}
	if e.DeviceTotal >= 0 {
		msg += fmt.Sprintf("; device %s free of %s", units.FormatBytes(e.DeviceFree), units.FormatBytes(e.DeviceTotal))
	}
	if e.Err != nil {
		msg += ": " + prefixed.Text(e.Err)
	}
	return msg
}

// Unwrap returns ErrOutOfMemory, which an OOMError is, and the source's
// error where there is one.
func (e *OOMError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrOutOfMemory}
	}
	return []error{ErrOutOfMemory, e.Err}
}

// sourceOOM marks an out-of-memory error from the source or from the limit.
type sourceOOM struct{ err error }

func (e sourceOOM) Error() string {
	if e.err == nil {
		return "pool: limit reached"
	}
	return e.err.Error()
}

// Text is the message without its package's prefix.
func (e sourceOOM) Text() string {
	if e.err == nil {
		return "limit reached"
	}
	return prefixed.Text(e.err)
}
func (e sourceOOM) Is(target error) bool { return target == ErrOutOfMemory }
func (e sourceOOM) Unwrap() error        { return e.err }

// markOutOfMemory wraps a source error in sourceOOM where it means no room.
func markOutOfMemory(err error) error {
	if errdefs.IsSourceOutOfMemory(err) {
		return sourceOOM{err}
	}
	return err
}
