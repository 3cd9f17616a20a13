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
	scopes := d.tree.Scopes()
	if e.Limit != nil {
		scopes = subtree(e.Limit.Scope) // by identity: a sibling of the same name is not within
	}
	sites := map[string]int64{} // allocation site -> bytes live from it
	for _, s := range scopes {
		info, ok := s.Info()
		if !ok {
			continue // it ended since
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

// subtree returns s and the open scopes within it, parents first.
func subtree(s scope.Scope) []scope.Scope {
	out := []scope.Scope{s}
	for _, c := range s.Children() {
		out = append(out, subtree(c)...)
	}
	return out
}
