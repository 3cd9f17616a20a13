package gpu

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// Snapshot is a device's memory at one moment: its counters, the layout of
// its pool (segments and blocks), and its open scopes with the buffers each
// owns. It marshals to JSON. Allocation sites are there where stacks are
// recorded ([RecordStacks], or gputest.VerifyTestMain).
type Snapshot struct {
	Device string          `json:"device"`
	Stats  Stats           `json:"stats"`
	Pool   PoolSnapshot    `json:"pool"`
	Scopes []ScopeSnapshot `json:"scopes"` // parents before their children
}

// PoolSnapshot is the layout of a device's pool: its segments, with the
// blocks that tile them, and the memory held mapped nowhere, with those of
// the pools of its Sleepable scopes awake (one asleep holds no memory).
// The sizes of the blocks that are not unmapped, plus IdleBytes, add up
// to Stats.Reserved. The pool's counters are the Snapshot's Stats.
type PoolSnapshot struct {
	Segments  []pool.SegmentInfo `json:"segments"`
	IdleBytes int64              `json:"idle_bytes"` // handles created and mapped nowhere
}

// ScopeSnapshot is one open scope.
type ScopeSnapshot struct {
	ID       uint64 `json:"id"` // unique in the process
	Name     string `json:"name"`
	Device   string `json:"device"`
	Path     string `json:"path"`
	Live     int64  `json:"live"` // bytes it and its children take (see Limit)
	Peak     int64  `json:"peak"`
	Limit    int64  `json:"limit,omitempty"`
	Reserved int64  `json:"reserved,omitempty"`
	// Evictable scopes (see Evictable) give way, lowest Priority first.
	Evictable bool `json:"evictable,omitempty"`
	Priority  int  `json:"priority,omitempty"`
	// Sleepable scopes (see Sleepable) can sleep; Asleep: it sleeps, or
	// the Sleepable scope it is in does, and its buffers hold no memory.
	Sleepable bool             `json:"sleepable,omitempty"`
	Asleep    bool             `json:"asleep,omitempty"`
	Own       int64            `json:"own"` // bytes of the buffers it owns itself, as asked for
	Buffers   []BufferSnapshot `json:"buffers"`
	OpenedAt  []string         `json:"opened_at,omitempty"`
	// What else it owns: streams, events, modules, page-locked memory.
	Resources []ResourceSnapshot `json:"resources,omitempty"`
}

// ResourceSnapshot is something other than device memory that a scope
// owns.
type ResourceSnapshot struct {
	ID     uint64   `json:"-"`    // unique in the process
	Kind   string   `json:"kind"` // "stream", "event", "module" or "page-locked memory"
	Bytes  int64    `json:"bytes,omitempty"`
	MadeAt []string `json:"made_at,omitempty"` // "function file:line", innermost first
}

// BufferSnapshot is one live buffer.
type BufferSnapshot struct {
	Key         bufferKey `json:"-"` // the buffer in this process: comparable, a map key (gputest's ignore list)
	Address     uintptr   `json:"address"`
	Size        int64     `json:"size"`
	AllocatedAt []string  `json:"allocated_at,omitempty"` // "function file:line", innermost first
}

// Snapshot returns the device's memory now. It copies under the pool's and
// the scopes' locks, so it is for diagnostics, not a hot path.
func (d *Device) Snapshot() (*Snapshot, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	d.flushExternal()
	ps := d.pool.Snapshot()
	for _, sl := range d.sleep.all() {
		if !sl.sleeping.Load() {
			q := sl.pool.Snapshot()
			ps.Segments, ps.IdleBytes = append(ps.Segments, q.Segments...), ps.IdleBytes+q.IdleBytes
		}
	}
	scopes := scopeSnapshots(d)
	st := d.stats(ps.Stats, len(scopes))
	return &Snapshot{Device: d.name, Stats: st, Pool: PoolSnapshot{Segments: ps.Segments, IdleBytes: ps.IdleBytes},
		Scopes: scopes}, nil
}

// bufferKey identifies a buffer: comparable, and it does not travel
// through JSON.
type bufferKey struct{ ref scope.Ref }

// scopeSnapshots describes the open scopes, parents first.
func scopeSnapshots(d *Device) []ScopeSnapshot {
	var out []ScopeSnapshot
	for _, s := range d.tree.Scopes() {
		if info, ok := s.Info(); ok { // else it ended since
			out = append(out, scopeSnapshot(d, info))
		}
	}
	return out
}

func scopeSnapshot(d *Device, s scope.Info) ScopeSnapshot {
	st := s.Stats
	out := ScopeSnapshot{ID: s.ID, Name: s.Name, Device: d.name, Path: s.Path, Live: st.Live, Peak: st.Peak,
		Limit: st.Limit, Reserved: st.Reserved, OpenedAt: frames(s.Stack), Asleep: st.Asleep, Sleepable: d.sleep.holds(s.Scope)}
	if st.LastUse > 0 { // counted for evictable scopes only
		out.Evictable, out.Priority = true, d.evict.priority(s.Scope)
	}
	for _, r := range s.Resources {
		if r.Kind != "" {
			out.Resources = append(out.Resources, ResourceSnapshot{ID: r.ID, Kind: r.Kind, Bytes: r.Bytes, MadeAt: frames(r.Stack)})
		}
	}
	for _, a := range s.Allocations {
		out.Own += a.Size
		out.Buffers = append(out.Buffers, BufferSnapshot{Key: bufferKey{a.Ref}, Address: a.Ptr, Size: a.Size,
			AllocatedAt: frames(a.Stack)})
	}
	return out
}

// frames turns recorded program counters into "function file:line" lines,
// leaving out gpuscope's own frames, the runtime's and the testing
// package's: the first line is where the user's code allocated.
func frames(pcs []uintptr) []string {
	if len(pcs) == 0 {
		return nil
	}
	var out []string
	fs := runtime.CallersFrames(pcs)
	for {
		f, more := fs.Next()
		if !ownFrame(f.Function) && !strings.HasPrefix(f.Function, "runtime.") && !strings.HasPrefix(f.Function, "testing.") {
			out = append(out, fmt.Sprintf("%s %s:%d", f.Function, f.File, f.Line))
		}
		if !more {
			return out
		}
	}
}

// Summary returns the device's memory as a table a person reads, in the
// manner of PyTorch's memory_summary: the totals, then the open scopes as a
// tree, each with the bytes it and its children take, its peak and its
// buffers, largest first.
func (d *Device) Summary() string {
	if err := d.usable(); err != nil {
		return "gpu: no summary: " + prefixed.Text(err)
	}
	st := d.Stats()
	var b strings.Builder
	fmt.Fprintf(&b, "device %s\n", d.String())
	row := func(what string, now, peak int64) {
		fmt.Fprintf(&b, "  %-10s %12s   peak %12s\n", what, units.FormatBytes(now), units.FormatBytes(peak))
	}
	row("allocated", st.Allocated, st.PeakAllocated)
	row("reserved", st.Reserved, st.PeakReserved)
	fmt.Fprintf(&b, "  %-10s %12s   (reserved, not in use, %s; EmptyCache returns it)\n", "cached",
		units.FormatBytes(st.Cached), units.Count(st.CachedBlocks, "free block"))
	fmt.Fprintf(&b, "  %-10s %12d   peak %12d\n", "buffers", st.ActiveBlocks, st.PeakActiveBlocks)
	fmt.Fprintf(&b, "  %-10s %s (%s), %s (%s), %d served from the cache, %d out of memory\n",
		"in all", units.Count(st.Allocs, "allocation"), units.FormatBytes(st.AllocatedBytes), units.Count(st.Frees, "free"),
		units.FormatBytes(st.FreedBytes), st.ServedFromCache, st.OOMs)
	if st.Evictions > 0 {
		fmt.Fprintf(&b, "  %-10s %s (%s) to make room, which served %s\n", "evicted", units.Count(st.Evictions, "scope"),
			units.FormatBytes(st.EvictedBytes), units.Count(d.evict.served.Load(), "allocation"))
	}
	if st.SleepingScopes > 0 {
		fmt.Fprintf(&b, "  %-10s %12s   in %s of %s, not in allocated; %s given back to the driver, %s kept in host memory\n",
			"asleep", units.FormatBytes(st.Sleeping), units.Count(st.SleepingBuffers, "buffer"), units.Count(st.SleepingScopes, "scope"),
			units.FormatBytes(st.SleepingReleased), units.FormatBytes(st.SleepingKept))
	}
	roots, n := scopeTree(d)
	if n == 0 {
		b.WriteString("no scope open\n")
		return b.String()
	}
	fmt.Fprintf(&b, "%s open (bytes taken with their children, peak, own buffers), largest first:\n", units.Count(n, "scope"))
	var walk func(nodes []*scopeNode, depth int)
	walk = func(nodes []*scopeNode, depth int) {
		slices.SortStableFunc(nodes, func(x, y *scopeNode) int { return cmp.Compare(y.Live, x.Live) })
		for _, s := range nodes {
			name := s.Name
			if name == "" {
				name = "scope"
			}
			evictable := ""
			if s.Evictable {
				evictable = fmt.Sprintf("   evictable (priority %d)", s.Priority)
			}
			switch {
			case s.Sleepable && s.Asleep:
				evictable += "   sleepable, asleep"
			case s.Sleepable:
				evictable += "   sleepable"
			}
			fmt.Fprintf(&b, "  %-28s %12s   peak %12s   %s (%s)%s\n", strings.Repeat("  ", depth)+name,
				units.FormatBytes(s.Live), units.FormatBytes(s.Peak), units.Count(len(s.Buffers), "buffer"), units.FormatBytes(s.Own), evictable)
			walk(s.children, depth+1)
		}
	}
	walk(roots, 0)
	return b.String()
}

// scopeNode is a scope of Summary's tree, with its children.
type scopeNode struct {
	ScopeSnapshot
	children []*scopeNode
}

// scopeTree describes the open scopes as a tree, returning its roots and
// how many scopes it holds. It is built by the scopes' IDs, not their
// paths: names may hold "/", and scopes of one path are distinct scopes.
func scopeTree(d *Device) (roots []*scopeNode, n int) {
	nodes := map[uint64]*scopeNode{}
	for _, s := range d.tree.Scopes() { // parents before their children
		info, ok := s.Info()
		if !ok {
			continue // it ended since, and so did its children
		}
		node := &scopeNode{ScopeSnapshot: scopeSnapshot(d, info)}
		nodes[info.ID] = node
		if parent, ok := nodes[info.Parent]; ok {
			parent.children = append(parent.children, node)
		} else {
			roots = append(roots, node)
		}
	}
	return roots, len(nodes)
}

// ownFrame reports whether function is this library's, not its user's.
func ownFrame(function string) bool {
	for _, pkg := range []string{"gpu.", "scope.", "pool."} {
		if strings.HasPrefix(function, "github.com/gpuscope/gpuscope/"+pkg) {
			return true
		}
	}
	return false
}
