package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// Sentinel errors, for errors.Is. Richer detail travels in typed errors:
// [*OOMError] for an allocation that found no room, with its cause (a
// scope's [*LimitError], or the device's figures). Errors of the layers
// below (pool, scope) reach a user of this package in its words, with its
// prefix, once, and match these sentinels as well as their own.
var (
	// ErrOutOfMemory: the device, or a scope's limit, has no room.
	ErrOutOfMemory = prefixed.New("gpu", "out of memory")
	// ErrInvalidSize: a size that is zero, negative or absurd.
	ErrInvalidSize = prefixed.New("gpu", "invalid size")
	// ErrScopeClosed: the scope has ended, or the buffer's scope has.
	ErrScopeClosed = prefixed.New("gpu", "scope closed")
	// ErrFreed: the buffer was freed already.
	ErrFreed = prefixed.New("gpu", "buffer already freed")
	// ErrWrongScope: a buffer freed or kept through a scope that does not own it.
	ErrWrongScope = prefixed.New("gpu", "buffer belongs to another scope")
	// ErrNotKept: Keep in a root scope, or of a buffer in the scope's own
	// reservation, which ends with the scope.
	ErrNotKept = prefixed.New("gpu", "buffer cannot be kept")
	// ErrNoDevice: no such device, or no CUDA support in this build.
	ErrNoDevice = prefixed.New("gpu", "no device")
	// ErrDeviceClosed: the device was closed. Its drivers return the same
	// error once closed.
	ErrDeviceClosed = driver.ErrClosed
	// ErrNotSupported: the device cannot do it (the host device runs no
	// kernels).
	ErrNotSupported = prefixed.New("gpu", "not supported by this device")
	// ErrEvicted: the scope was evicted to make room for another
	// allocation (see [Evictable]); the cause of its context, and what its
	// buffers fail with.
	ErrEvicted = prefixed.New("gpu", "scope evicted")
)

// LimitError is the detail of an allocation refused by a scope's limit,
// the cause of an [*OOMError] whose Limit is set.
type LimitError = scope.LimitError

// OOMError is an allocation refused for want of memory, as a user of this
// package receives it. Exactly one of Limit and Device is set: a scope's
// Limit refused it, or the device had no room. It is ErrOutOfMemory, and
// errors.As finds its cause (*LimitError, *pool.OOMError) too.
type OOMError struct {
	Scope     string // the path of the scope that allocated
	Requested int64  // bytes asked for

	Limit  *LimitError    // the scope whose limit refused it, the limit, and what the scope held
	Device *pool.OOMError // the device's figures when it had no room: allocated, reserved, free

	// Holders are the scopes that hold the most memory, largest first (at
	// most three): on the device, or within the limited scope. Sites are
	// the allocation sites that hold the most, where stacks are recorded
	// ([RecordStacks]).
	Holders []Holder
	Sites   []Site
	Cached  int64 // bytes the device's pool keeps free for reuse
	device  string
}

// Holder is a scope and the memory its own buffers hold.
type Holder struct {
	Scope   string // its path
	Bytes   int64
	Buffers int
	Site    string // where its first buffer was allocated, where stacks are recorded
}

// Site is an allocation site and the bytes live from it.
type Site struct {
	Site  string // "function file:line"
	Bytes int64
}

// Error leads with what refused the allocation, then what holds the
// memory, then what would help for that cause.
func (e *OOMError) Error() string { return "gpu: " + e.text() }

// text is the message without the prefix.
func (e *OOMError) text() string {
	var b strings.Builder
	b.WriteString("out of memory: ")
	switch {
	case e.Limit != nil:
		l := e.Limit
		fmt.Fprintf(&b, "the limit of scope %q (%s) refused %s", l.Path, units.FormatBytes(l.Limit), units.FormatBytes(l.Requested))
		if e.Scope != l.Path {
			fmt.Fprintf(&b, " for scope %q", e.Scope)
		}
		fmt.Fprintf(&b, ": %s live in it", units.FormatBytes(l.Live))
	case e.Device != nil && e.capRefused():
		d := e.Device
		fmt.Fprintf(&b, "the pool's cap (%s) refused %s in scope %q on device %s: %s reserved under it, %s allocated (largest free block %s)",
			units.FormatBytes(d.Limit), units.FormatBytes(e.Requested), e.Scope, e.device, units.FormatBytes(d.Reserved),
			units.FormatBytes(d.Allocated), units.FormatBytes(d.LargestFree))
		b.WriteString("; raise it with Device.SetMaxReserved, or with the MaxReserved or MaxReservedFraction option at Open")
		if d.DeviceTotal >= 0 {
			fmt.Fprintf(&b, "; the device has %s free of %s", units.FormatBytes(d.DeviceFree), units.FormatBytes(d.DeviceTotal))
		}
	case e.Device != nil:
		d := e.Device
		fmt.Fprintf(&b, "device %s has no room for %s in scope %q: %s allocated, %s reserved (largest free block %s)",
			e.device, units.FormatBytes(e.Requested), e.Scope, units.FormatBytes(d.Allocated), units.FormatBytes(d.Reserved),
			units.FormatBytes(d.LargestFree))
		if d.Limit > 0 {
			fmt.Fprintf(&b, ", the pool's cap %s", units.FormatBytes(d.Limit))
		}
		if d.DeviceTotal >= 0 {
			fmt.Fprintf(&b, ", %s free of %s on the device", units.FormatBytes(d.DeviceFree), units.FormatBytes(d.DeviceTotal))
			if e.Requested > d.DeviceTotal {
				b.WriteString(" (the request is larger than the device)")
			}
		}
	default:
		fmt.Fprintf(&b, "%s in scope %q", units.FormatBytes(e.Requested), e.Scope)
	}
	e.writeHolders(&b)
	e.writeHelp(&b)
	return b.String()
}

// writeHolders writes the scopes and the sites that hold the most.
func (e *OOMError) writeHolders(b *strings.Builder) {
	if len(e.Holders) > 0 {
		b.WriteString("; largest holders:")
		for i, h := range e.Holders {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(b, " scope %q %s in %s", h.Scope, units.FormatBytes(h.Bytes), units.Count(h.Buffers, "buffer"))
			if h.Site != "" {
				fmt.Fprintf(b, " (first allocated at %s)", h.Site)
			}
		}
	}
	if len(e.Sites) > 0 {
		b.WriteString("; largest allocation sites:")
		for i, s := range e.Sites {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(b, " %s %s", s.Site, units.FormatBytes(s.Bytes))
		}
	}
}

// writeHelp writes what would help, for what refused the allocation.
func (e *OOMError) writeHelp(b *strings.Builder) {
	switch {
	case e.Limit != nil:
		fmt.Fprintf(b, "; to fit, free buffers in scope %q early (Scope.Free), raise its Limit, or allocate less at once", e.Limit.Path)
	case e.capRefused():
		b.WriteString("; to fit, raise the cap, free buffers early, or use smaller batches")
	default:
		b.WriteString("; to fit, free buffers early, put a Limit on the scopes that grow, or use smaller batches")
		if e.Cached > 0 {
			fmt.Fprintf(b, "; %s is cached (free, kept by the pool for reuse; EmptyCache returns it to the driver)", units.FormatBytes(e.Cached))
		}
	}
}

// capRefused reports whether the pool's cap refused the allocation, where
// the device itself would have had room for it: the pool then names no
// cause of the driver's.
func (e *OOMError) capRefused() bool {
	d := e.Device
	return d != nil && d.Err == nil && d.Limit > 0 && (d.DeviceTotal < 0 || e.Requested <= d.DeviceTotal)
}

// Unwrap returns ErrOutOfMemory, which an OOMError is, and its cause: the
// *LimitError or the *pool.OOMError.
func (e *OOMError) Unwrap() []error {
	switch {
	case e.Limit != nil:
		return []error{ErrOutOfMemory, e.Limit}
	case e.Device != nil:
		return []error{ErrOutOfMemory, e.Device}
	}
	return []error{ErrOutOfMemory}
}

// lowerSentinels pairs the sentinels of the layers below with this
// package's: an error that is the lower one is the own one too, and says
// it in this package's words.
var lowerSentinels = [...]struct{ lower, own error }{
	{pool.ErrClosed, ErrDeviceClosed},
	{pool.ErrOutOfMemory, ErrOutOfMemory},
	{pool.ErrInvalidSize, ErrInvalidSize},
	{scope.ErrClosed, ErrScopeClosed},
	{scope.ErrFreed, ErrFreed},
	{scope.ErrWrongScope, ErrWrongScope},
	{scope.ErrNotKept, ErrNotKept},
}

// staleHint says what a stale handle means, where the layer below returns
// only its sentinel.
func staleHint(err error) string {
	switch err {
	case scope.ErrClosed:
		return "the buffer's scope has ended (Scope.Keep hands a buffer to the parent scope, to outlive its own)"
	case scope.ErrFreed:
		return "the buffer was freed (Scope.Free); its handle is stale"
	}
	return ""
}

// crossedError is an error of the layers below (pool, scope, the drivers)
// or of this package, as a user of this package receives it: prefixed
// "gpu: " once, the lower sentinels named in this package's words, and
// matching this package's sentinels as well as, through Unwrap, the lower
// ones. Nothing here reads a message: the layers keep their prefixes
// apart from their texts (package prefixed).
type crossedError struct {
	err  error
	hint string // what a bare lower sentinel means here, or ""
}

func (e *crossedError) Error() string { return "gpu: " + e.text() }

// text is the message without the prefix.
func (e *crossedError) text() string {
	t := prefixed.TextAs(e.err, ownWords)
	if e.hint != "" {
		t += ": " + e.hint
	}
	return t
}

// Text is the message without the prefix, for a layer above that wraps
// it (gputest).
func (e *crossedError) Text() string { return e.text() }

func (e *crossedError) Unwrap() error { return e.err }

// Is reports whether the error is target, one of this package's sentinels
// whose lower counterpart is in its chain.
func (e *crossedError) Is(target error) bool {
	for _, p := range lowerSentinels {
		if target == p.own && errors.Is(e.err, p.lower) {
			return true
		}
	}
	return false
}

// ownWords names, in this package's words, an error in a chain that a
// crossedError writes: a lower sentinel by this package's, and this
// package's own errors without their prefix. "": the error's own words.
func ownWords(err error) string {
	switch e := err.(type) {
	case *crossedError:
		return e.text()
	case *OOMError:
		return e.text()
	case *waitError:
		return e.text()
	case *scope.LimitError:
		return fmt.Sprintf("out of memory: the limit of scope %q (%s) refused %s: %s live in it",
			e.Path, units.FormatBytes(e.Limit), units.FormatBytes(e.Requested), units.FormatBytes(e.Live))
	case *pool.OOMError:
		return fmt.Sprintf("out of memory: %s asked of the pool: %s allocated, %s reserved (largest free block %s)",
			units.FormatBytes(e.Requested), units.FormatBytes(e.Allocated), units.FormatBytes(e.Reserved), units.FormatBytes(e.LargestFree))
	case *driver.NoStreamError:
		return fmt.Sprintf("stream %#x does not exist", e.Stream)
	}
	for _, p := range lowerSentinels {
		if err == p.lower {
			return prefixed.Text(p.own)
		}
	}
	return ""
}

// deviceError is err as a user of this package receives it: the errors of
// the layers below and this package's own, prefixed "gpu: " once
// ([crossedError]). Errors already crossed pass unchanged, and so do
// errors of other origin (a user's own, returned through Buffer.Use).
func deviceError(err error) error {
	if err == nil || !fromBelow(err) {
		return err
	}
	return &crossedError{err: err, hint: staleHint(err)}
}

// fromBelow reports whether err is an error of gpuscope's layers still to
// be put in this package's words: one that knows its prefix
// (prefixed.Texter), a typed error of a layer below, or errors.Join of
// errors some of which are.
func fromBelow(err error) bool {
	switch e := err.(type) {
	case *crossedError, *OOMError, *waitError:
		return false
	case prefixed.Texter, *scope.LimitError, *pool.OOMError, *driver.NoStreamError, *driver.OutOfMemoryError:
		return true
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(e.Unwrap(), fromBelow)
	}
	return false
}

// ownText is err's message in this package's words, without the prefix:
// for a clause of a longer message.
func ownText(err error) string { return prefixed.TextAs(err, ownWords) }

// isOutOfMemory reports whether err means no room: the device's or a
// scope limit's, before or after deviceError.
func isOutOfMemory(err error) bool { return errors.Is(err, pool.ErrOutOfMemory) }
