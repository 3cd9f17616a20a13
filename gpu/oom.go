package gpu

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuscope/gpuscope/pool"
)

// outOfMemory adds to an out-of-memory error of an allocation in scope path
// what a person needs to act on it: the scopes that hold the most memory,
// with the sites that allocated it where stacks are recorded, and what to
// try. The error stays ErrOutOfMemory, and an *OOMError or *LimitError.
func (d *Device) outOfMemory(path string, err error) error {
	type holder struct {
		path  string
		bytes int64
		n     int
		site  string
	}
	var hs []holder
	sites := map[string]int64{} // allocation site -> bytes live from it
	for _, s := range d.tree.Scopes() {
		info, ok := s.Info()
		if !ok {
			continue // it ended since
		}
		h := holder{path: info.Path}
		for _, a := range info.Allocations {
			h.bytes += a.Size
			h.n++
			if f := frames(a.Stack); len(f) > 0 {
				sites[f[0]] += a.Size
				if h.site == "" {
					h.site = f[0]
				}
			}
		}
		if h.n > 0 {
			hs = append(hs, h)
		}
	}
	slices.SortStableFunc(hs, func(x, y holder) int { return cmp.Compare(y.bytes, x.bytes) })
	top := make([]string, 0, len(sites))
	for site := range sites {
		top = append(top, site)
	}
	slices.SortFunc(top, func(x, y string) int { return cmp.Or(cmp.Compare(sites[y], sites[x]), cmp.Compare(x, y)) })
	var b strings.Builder
	fmt.Fprintf(&b, "gpu: out of memory in scope %q", path)
	if len(hs) > 0 {
		b.WriteString("; largest holders:")
		for i, h := range hs[:min(3, len(hs))] {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " scope %q %s in %d buffers", h.path, pool.FormatBytes(h.bytes), h.n)
			if h.site != "" {
				fmt.Fprintf(&b, " (first allocated at %s)", h.site)
			}
		}
	}
	if len(top) > 0 {
		b.WriteString("; largest allocation sites:")
		for i, site := range top[:min(3, len(top))] {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s %s", site, pool.FormatBytes(sites[site]))
		}
	}
	st := d.pool.Stats()
	fmt.Fprintf(&b, "; %s cached (EmptyCache returns it to the driver); a Limit on the scopes that grow, or smaller batches, need less",
		pool.FormatBytes(st.Cached))
	err = fmt.Errorf("%s: %w", b.String(), err)
	if d.onOOM != nil {
		d.onOOM(err)
	}
	return err
}
