package gpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpuscope/gpuscope/gpu/driver"
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
func (e *OOMError) Error() string {
	var b strings.Builder
	b.WriteString("gpu: out of memory: ")
	switch {
	case e.Limit != nil:
		l := e.Limit
		fmt.Fprintf(&b, "the limit of scope %q (%s) refused %s", l.Path, units.FormatBytes(l.Limit), units.FormatBytes(l.Requested))
		if e.Scope != l.Path {
			fmt.Fprintf(&b, " for scope %q", e.Scope)
		}
		fmt.Fprintf(&b, ": %s live in it", units.FormatBytes(l.Live))
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
	if len(e.Holders) > 0 {
		b.WriteString("; largest holders:")
		for i, h := range e.Holders {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " scope %q %s in %d buffers", h.Scope, units.FormatBytes(h.Bytes), h.Buffers)
			if h.Site != "" {
				fmt.Fprintf(&b, " (first allocated at %s)", h.Site)
			}
		}
	}
	if len(e.Sites) > 0 {
		b.WriteString("; largest allocation sites:")
		for i, s := range e.Sites {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s %s", s.Site, units.FormatBytes(s.Bytes))
		}
	}
	if e.Limit != nil {
		fmt.Fprintf(&b, "; to fit, free buffers in scope %q early (Scope.Free), raise its Limit, or allocate less at once", e.Limit.Path)
	} else {
		b.WriteString("; to fit, free buffers early, put a Limit on the scopes that grow, or use smaller batches")
		if e.Cached > 0 {
			fmt.Fprintf(&b, "; %s is cached (free, kept by the pool for reuse; EmptyCache returns it to the driver)", units.FormatBytes(e.Cached))
		}
	}
	return b.String()
}

// Is reports that an OOMError is ErrOutOfMemory.
func (e *OOMError) Is(target error) bool { return target == ErrOutOfMemory }

// Unwrap returns the cause: the *LimitError or the *pool.OOMError.
func (e *OOMError) Unwrap() error {
	if e.Limit != nil {
		return e.Limit
	}
	if e.Device != nil {
		return e.Device
	}
	return nil
}

// lowerSentinels pairs the errors of the layers below with this package's.
var lowerSentinels = [...]struct{ lower, own error }{
	{pool.ErrClosed, ErrDeviceClosed},
	{pool.ErrOutOfMemory, ErrOutOfMemory},
	{pool.ErrInvalidSize, ErrInvalidSize},
	{scope.ErrClosed, ErrScopeClosed},
	{scope.ErrFreed, ErrFreed},
	{scope.ErrWrongScope, ErrWrongScope},
	{scope.ErrNotKept, ErrNotKept},
}

// staleHints say what a stale handle means, where the layer below says
// only that it is stale.
var staleHints = map[error]string{
	scope.ErrClosed: "the buffer's scope has ended (Scope.Keep hands a buffer to the parent scope, to outlive its own)",
	scope.ErrFreed:  "the buffer was freed (Scope.Free); its handle is stale",
}

// crossedError is an error from a layer below, as it reaches a user of this
// package: in this package's words, once (the lower layer's sentinel and
// prefixes give way to this package's), matching this package's sentinel
// and, through Unwrap, the lower error.
type crossedError struct {
	err   error
	own   error // this package's sentinel; nil: none, the message is prefixed "gpu"
	lower error // the lower sentinel whose words own replaces
}

func (e *crossedError) Error() string {
	msg := e.err.Error()
	if e.lower != nil {
		msg = strings.Replace(msg, e.lower.Error(), "", 1)
	}
	var parts []string
	for _, p := range strings.Split(msg, ": ") {
		p = strings.TrimSuffix(strings.TrimSpace(p), ":")
		if p != "" && p != "scope" && p != "pool" && p != "gpu" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		if h, ok := staleHints[e.lower]; ok {
			parts = append(parts, h) // a handle checked and found stale: say what that means
		}
	}
	head := "gpu"
	if e.own != nil {
		head = e.own.Error()
	}
	return strings.Join(append([]string{head}, parts...), ": ")
}

func (e *crossedError) Unwrap() error        { return e.err }
func (e *crossedError) Is(target error) bool { return e.own != nil && target == e.own }

// deviceError puts an error from the layers below in this package's terms,
// once: the pool's and scope's sentinels match this package's, and the
// message is this package's, with no prefix of a lower layer. Errors
// already in these terms, and errors of other origin, pass unchanged.
func deviceError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*crossedError); ok {
		return err
	}
	for _, p := range lowerSentinels {
		if errors.Is(err, p.lower) {
			if errors.Is(err, p.own) && !strings.Contains(err.Error(), p.lower.Error()) {
				return err
			}
			return &crossedError{err: err, own: p.own, lower: p.lower}
		}
	}
	if msg := err.Error(); strings.HasPrefix(msg, "scope") || strings.HasPrefix(msg, "pool:") {
		return &crossedError{err: err}
	}
	return err
}

// isOutOfMemory reports whether err means no room: the device's or a
// scope limit's, before or after deviceError.
func isOutOfMemory(err error) bool { return errors.Is(err, pool.ErrOutOfMemory) }
