package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuscope/gpuscope/internal/callers"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// OOMError is an allocation refused for want of memory, as a user of this
// package receives it. Exactly one of Limit and Device is set: a scope's
// Limit refused it, or the device had no room; or, on a test's faulty
// device, neither: a fault the test injected (gputest.OpRequest), which
// errors.Is finds. It is ErrOutOfMemory, and errors.As finds its cause
// (*LimitError, *pool.OOMError) too.
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
	Cached  int64 // bytes the device's pools keep free for reuse, as Stats.Cached (EmptyCache returns them)
	device  string
	calls   callers.Names // what the caller calls what would help: Go's calls, or C's or Python's

	injected *injectedFault // the fault a test injected into the request, or nil
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
		fmt.Fprintf(&b, "the pool's cap of %s", units.Precise(d.Limit))
		if d.Page > 0 {
			fmt.Fprintf(&b, ", which holds whole pages of %s,", units.FormatBytes(d.Page))
		}
		fmt.Fprintf(&b, " refused %s in scope %q on device %s: %s reserved under it, %s allocated (largest free block %s)",
			units.FormatBytes(e.Requested), e.Scope, e.device, units.FormatBytes(d.Reserved),
			units.FormatBytes(d.Allocated), units.FormatBytes(d.LargestFree))
		e.writeRaise(&b)
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
	case e.injected != nil:
		fmt.Fprintf(&b, "%s in scope %q: %s", units.FormatBytes(e.Requested), e.Scope, e.injected.Text())
	default:
		fmt.Fprintf(&b, "%s in scope %q", units.FormatBytes(e.Requested), e.Scope)
	}
	e.writeHolders(&b)
	e.writeHelp(&b)
	return b.String()
}

// writeRaise says how the caller raises the pool's cap, in the calls it
// makes.
func (e *OOMError) writeRaise(b *strings.Builder) {
	fmt.Fprintf(b, "; raise it with %s", e.calls.SetMaxReserved)
	if e.calls.AtOpen != "" {
		fmt.Fprintf(b, ", or with %s", e.calls.AtOpen)
	}
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
	switch beyond := e.beyond(e.Requested); {
	case e.injected != nil:
		// No memory was short: nothing to advise.
	case beyond == "limit":
		fmt.Fprintf(b, "; to fit, raise the Limit of scope %q above the request, or allocate less at once", e.Limit.Path)
	case e.Limit != nil:
		fmt.Fprintf(b, "; to fit, free buffers in scope %q early (Scope.Free), raise its Limit, or allocate less at once", e.Limit.Path)
	case beyond == "device":
		// Neither freeing buffers nor emptying the cache makes room.
		b.WriteString("; to fit, allocate less at once (smaller batches), or use a device with more memory")
	case beyond == "cap":
		b.WriteString("; to fit, raise the cap above the request, or use smaller batches")
	case e.capRefused():
		b.WriteString("; to fit, raise the cap, free buffers early, or use smaller batches")
	default:
		b.WriteString("; to fit, free buffers early, ")
		if e.calls.Limit != "" {
			fmt.Fprintf(b, "put a %s on the scopes that grow, ", e.calls.Limit)
		}
		b.WriteString("or use smaller batches")
		if e.Cached > 0 {
			fmt.Fprintf(b, "; %s is cached (free, kept by the pool for reuse; %s returns it to the driver)", units.FormatBytes(e.Cached), e.calls.EmptyCache)
		}
	}
}

// beyond names what size bytes alone exceed, so that no memory released
// makes room for them: "limit" (the Limit that refused them), "device",
// or "cap" (the pool's); "" where releasing memory could.
func (e *OOMError) beyond(size int64) string {
	if l := e.Limit; l != nil {
		if size > l.Limit {
			return "limit"
		}
		return ""
	}
	switch d := e.Device; {
	case d == nil:
		return ""
	case d.DeviceTotal >= 0 && size > d.DeviceTotal:
		return "device"
	case d.Limit > 0 && size > underCap(d.Limit, d.Page):
		return "cap"
	}
	return ""
}

// underCap is the most a pool reserves under a cap of limit bytes: as
// many whole pages of page bytes as fit (the cap itself where the page is
// not known).
func underCap(limit, page int64) int64 {
	if page <= 0 || limit < page {
		return limit
	}
	return limit - limit%page
}

// capRefused reports whether the pool's cap refused the allocation, where
// the device itself would have had room for it: the pool then names no
// cause of the driver's.
func (e *OOMError) capRefused() bool {
	d := e.Device
	return d != nil && d.Err == nil && d.Limit > 0 && (d.DeviceTotal < 0 || e.Requested <= d.DeviceTotal)
}

// Unwrap returns ErrOutOfMemory, which an OOMError is, and its cause: the
// *LimitError, the *pool.OOMError, or a test's injected fault.
func (e *OOMError) Unwrap() []error {
	switch {
	case e.Limit != nil:
		return []error{ErrOutOfMemory, e.Limit}
	case e.Device != nil:
		return []error{ErrOutOfMemory, e.Device}
	case e.injected != nil:
		return []error{ErrOutOfMemory, e.injected}
	}
	return []error{ErrOutOfMemory}
}

// outOfMemory makes the error a user receives for an out-of-memory error
// of an allocation of size bytes in scope path: an *OOMError that says
// what refused it (a scope's limit, or the device), the scopes and the
// sites that hold the most memory (within the limited scope, for a
// limit), and what would help for that cause, in the calls of the caller
// that ctx, the scope's context, names (internal/callers).
func outOfMemory(ctx context.Context, d *Device, path string, size int64, err error) error {
	e := &OOMError{Scope: path, Requested: size, device: d.name, calls: callers.From(ctx)}
	if !errors.As(err, &e.Limit) && !errors.As(err, &e.Device) {
		errors.As(err, &e.injected)
	}
	var device *pool.OOMError
	if e.Device != nil && errors.As(e.Device.Err, &device) {
		// A Sleepable scope's pool: the device's pool's cap refused its
		// page (pool.Pool.Charge), with the device's figures.
		e.Device = device
	}
	e.Device = d.deviceFigures(e.Device)
	within := withinLimit(e.Limit)
	sites := map[string]int64{}         // allocation site -> bytes live from it
	for _, s := range d.tree.Scopes() { // parents before their children
		info, ok := s.Info()
		if !ok || !within(info) {
			continue // it ended since, or it is outside the limited scope
		}
		h := Holder{Scope: info.Path}
		for _, a := range info.Allocations {
			h.Bytes += a.Size
			h.Buffers++
			if f := frames(a.Stack); len(f) > 0 {
				sites[f[0]] += a.Size
				if h.Site == "" {
					h.Site = f[0]
				}
			}
		}
		if h.Buffers > 0 {
			e.Holders = append(e.Holders, h)
		}
	}
	slices.SortStableFunc(e.Holders, func(x, y Holder) int { return cmp.Compare(y.Bytes, x.Bytes) })
	e.Holders = e.Holders[:min(3, len(e.Holders))]
	for site, n := range sites {
		e.Sites = append(e.Sites, Site{site, n})
	}
	slices.SortFunc(e.Sites, func(x, y Site) int { return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Site, y.Site)) })
	e.Sites = e.Sites[:min(3, len(e.Sites))]
	if e.Limit == nil {
		e.Cached = d.figures().Cached // not the Sleepable scopes' buffers, which the device's pool counts as reserved
	}
	if d.onOOM != nil {
		d.onOOM(e)
	}
	return e
}

// withinLimit returns whether a scope, met parents first, is within the
// scope whose limit l refused an allocation: that scope or a descendant,
// by identity, so that a sibling of the same name is not. Every scope is,
// where l is nil.
func withinLimit(l *LimitError) func(scope.Info) bool {
	if l == nil {
		return func(scope.Info) bool { return true }
	}
	limited, ok := l.Scope.Info()
	if !ok {
		return func(scope.Info) bool { return false } // it ended since
	}
	in := map[uint64]bool{limited.ID: true}
	return func(info scope.Info) bool {
		if in[info.ID] || in[info.Parent] {
			in[info.ID] = true
			return true
		}
		return false
	}
}
