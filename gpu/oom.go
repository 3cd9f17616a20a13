package gpu

import (
	"cmp"
	"errors"
	"slices"

	"github.com/gpuscope/gpuscope/scope"
)

// outOfMemory makes the error a user receives for an out-of-memory error
// of an allocation of size bytes in scope path: an *OOMError that says
// what refused it (a scope's limit, or the device), the scopes and the
// sites that hold the most memory (within the limited scope, for a
// limit), and what would help for that cause.
func outOfMemory(d *Device, path string, size int64, err error) error {
	e := &OOMError{Scope: path, Requested: size, device: d.name}
	if !errors.As(err, &e.Limit) {
		errors.As(err, &e.Device)
	}
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
		e.Cached = d.pool.Stats().Cached
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
