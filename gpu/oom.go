package gpu

import (
	"cmp"
	"errors"
	"slices"
	"strings"
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
	within := ""
	if e.Limit != nil {
		within = e.Limit.Path
	}
	sites := map[string]int64{} // allocation site -> bytes live from it
	for _, s := range d.tree.Scopes() {
		info, ok := s.Info()
		if !ok {
			continue // it ended since
		}
		if within != "" && info.Path != within && !strings.HasPrefix(info.Path, within+"/") {
			continue
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
