package gpu

import (
	"fmt"
	"log/slog"

	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
)

// Stats are a device's memory counters, copied at one moment. Byte counts
// are of blocks as the device's pool rounds them (multiples of 512 bytes),
// except Requested, which counts the sizes asked for. It marshals to JSON
// with snake_case names; an expvar.Var is any type with a String method:
//
//	expvar.Publish("gpu0", expvar.Func(func() any { return dev.Stats() }))
type Stats struct {
	// Now.
	Allocated    int64 `json:"allocated"`     // bytes in live buffers
	Requested    int64 `json:"requested"`     // bytes asked for, over live buffers
	Reserved     int64 `json:"reserved"`      // bytes the device's pool holds from the driver
	Cached       int64 `json:"cached"`        // Reserved - Allocated: free bytes kept for reuse (EmptyCache returns them)
	ActiveBlocks int64 `json:"active_blocks"` // live buffers
	CachedBlocks int64 `json:"cached_blocks"` // free blocks the pool keeps
	Segments     int64 `json:"segments"`      // segments of memory the pool holds (address space with nothing mapped is none)
	OpenScopes   int   `json:"open_scopes"`   // scopes open on the device

	// Now, page-locked host memory (AllocHost): bytes as its cache's size
	// classes round them (at least 4 KiB, four sizes per doubling).
	PinnedAllocated    int64 `json:"pinned_allocated"`     // bytes in live HostSlices
	PinnedActiveBlocks int64 `json:"pinned_active_blocks"` // live HostSlices
	PinnedCached       int64 `json:"pinned_cached"`        // bytes kept for reuse, PinnedPending among them (EmptyCache returns them)
	PinnedCachedBlocks int64 `json:"pinned_cached_blocks"` // blocks kept for reuse
	PinnedPending      int64 `json:"pinned_pending"`       // the part of PinnedCached that queued copies may still use: reused once they have run

	// Now, Sleepable scopes asleep (Scope.Sleep): their buffers hold no
	// device memory, and are in none of the counts above.
	Sleeping         int64 `json:"sleeping"`          // bytes in their live buffers, which Wake gives memory again
	SleepingBuffers  int64 `json:"sleeping_buffers"`  // their live buffers
	SleepingReleased int64 `json:"sleeping_released"` // bytes of device memory they gave back to the driver, which Wake takes again
	SleepingKept     int64 `json:"sleeping_kept"`     // bytes of their contents kept in host memory (KeepContents): page-locked ones are in PinnedAllocated too
	SleepingScopes   int   `json:"sleeping_scopes"`   // Sleepable scopes asleep

	// Peaks, since the device was opened or ResetPeaks was called.
	// PeakReserved is exact; PeakAllocated and PeakActiveBlocks are exact
	// while one goroutine allocates, and may fall short under concurrent
	// allocation (docs/pool.md says why). Where Sleepable scopes' pools
	// count their own, the largest peak, or what is allocated now: a
	// lower bound.
	PeakAllocated    int64 `json:"peak_allocated"`
	PeakReserved     int64 `json:"peak_reserved"`
	PeakActiveBlocks int64 `json:"peak_active_blocks"`

	// Totals, since the device was opened.
	Allocs          int64 `json:"allocs"`            // successful allocations
	Frees           int64 `json:"frees"`             // frees, early or at a scope's end
	AllocatedBytes  int64 `json:"allocated_bytes"`   // bytes of all allocations
	FreedBytes      int64 `json:"freed_bytes"`       // bytes of all frees
	ServedFromCache int64 `json:"served_from_cache"` // allocations served from memory the pool held, with no driver call
	CacheHits       int64 `json:"cache_hits"`        // the part of ServedFromCache the small-block front cache served
	SourceAllocs    int64 `json:"source_allocs"`     // driver calls that obtained memory
	SourceFrees     int64 `json:"source_frees"`      // driver calls that returned memory
	Growths         int64 `json:"growths"`           // times the pool mapped more memory into an arena
	PagesMapped     int64 `json:"pages_mapped"`      // pages mapped into arenas, new or moved
	PagesMoved      int64 `json:"pages_moved"`       // pages unmapped from under free blocks to be mapped elsewhere
	OOMs            int64 `json:"ooms"`              // allocations the device had no room for (a scope's Limit refusing one is not counted, nor one that eviction or a wait made room for)
	Retries         int64 `json:"retries"`           // allocations retried after the pool released its cache
	Evictions       int64 `json:"evictions"`         // Evictable scopes evicted to make room
	EvictedBytes    int64 `json:"evicted_bytes"`     // bytes those scopes held
	Sleeps          int64 `json:"sleeps"`            // Sleepable scopes put to sleep
	Wakes           int64 `json:"wakes"`             // Sleepable scopes woken

	// Totals, page-locked host memory.
	PinnedHits        int64 `json:"pinned_hits"`         // AllocHost calls its cache served, with no driver call
	PinnedMisses      int64 `json:"pinned_misses"`       // AllocHost calls that allocated from the driver
	PinnedDriverFrees int64 `json:"pinned_driver_frees"` // blocks given back to the driver: EmptyCache, Close, an allocation it had no room for
}

// String describes the counters in a line a person reads: what is in use,
// what the device holds for it, and the peaks.
func (s Stats) String() string {
	str := fmt.Sprintf("allocated %s (peak %s), reserved %s (peak %s), cached %s; %s live, %s open",
		units.FormatBytes(s.Allocated), units.FormatBytes(s.PeakAllocated), units.FormatBytes(s.Reserved),
		units.FormatBytes(s.PeakReserved), units.FormatBytes(s.Cached), units.Count(s.ActiveBlocks, "buffer"), units.Count(s.OpenScopes, "scope"))
	if s.SleepingScopes > 0 {
		str += fmt.Sprintf("; %s asleep in %s", units.FormatBytes(s.Sleeping), units.Count(s.SleepingScopes, "scope"))
	}
	return str
}

// LogValue makes a slog record show the counters as a group.
func (s Stats) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int64("allocated", s.Allocated), slog.Int64("peak_allocated", s.PeakAllocated),
		slog.Int64("reserved", s.Reserved), slog.Int64("peak_reserved", s.PeakReserved),
		slog.Int64("cached", s.Cached), slog.Int64("buffers", s.ActiveBlocks),
		slog.Int("scopes", s.OpenScopes), slog.Int64("allocs", s.Allocs), slog.Int64("frees", s.Frees),
		slog.Int64("ooms", s.OOMs))
}

// Stats returns the device's counters; zero for a nil or zero Device.
func (d *Device) Stats() Stats {
	if !d.valid() {
		return Stats{}
	}
	d.flushExternal()
	return d.stats(d.pool.Stats(), len(d.tree.Scopes()))
}

// ResetPeaks sets the device's peaks to what is allocated and reserved now,
// so that the next peaks are those of what runs next.
func (d *Device) ResetPeaks() {
	if d.valid() {
		d.pool.ResetPeaks()
	}
}

// stats puts the pool's counters in the device's terms, with those of the
// Sleepable scopes' pools.
func (d *Device) stats(p pool.Stats, openScopes int) Stats {
	h := d.host.snapshot()
	sf := d.sleep.addTo(&p)
	// An allocation calls the driver when it grows an expandable arena, or
	// allocates a segment of its own where arenas are not expandable.
	viaDriver := p.Growths
	if !d.pool.Expandable() {
		viaDriver = p.SourceAllocs
	}
	return Stats{
		Allocated: p.Allocated, Requested: p.Requested, Reserved: p.Reserved, Cached: p.Cached,
		ActiveBlocks: p.ActiveBlocks, CachedBlocks: p.CachedBlocks, Segments: p.Segments,
		OpenScopes:    openScopes,
		PeakAllocated: p.PeakAllocated, PeakReserved: p.PeakReserved, PeakActiveBlocks: p.PeakActiveBlocks,
		Allocs: p.Allocs, Frees: p.Frees, AllocatedBytes: p.AllocatedBytes, FreedBytes: p.FreedBytes,
		ServedFromCache: max(0, p.Allocs-viaDriver), CacheHits: p.CacheHits,
		SourceAllocs: p.SourceAllocs, SourceFrees: p.SourceFrees, Growths: p.Growths,
		PagesMapped: p.PagesMapped, PagesMoved: p.PagesMoved, OOMs: max(0, p.OOMs-d.evict.absorbed.Load()), Retries: p.Retries,
		PinnedAllocated: h.Allocated, PinnedActiveBlocks: h.ActiveBlocks, PinnedCached: h.Cached,
		PinnedCachedBlocks: h.CachedBlocks, PinnedPending: h.Pending,
		PinnedHits: h.Hits, PinnedMisses: h.Misses, PinnedDriverFrees: h.DriverFrees,
		Evictions: d.evict.evictions.Load(), EvictedBytes: d.evict.bytes.Load(),
		Sleeping: sf.allocated, SleepingBuffers: sf.blocks, SleepingReleased: sf.released, SleepingKept: sf.kept,
		SleepingScopes: sf.scopes, Sleeps: d.sleep.sleeps.Load(), Wakes: d.sleep.wakes.Load(),
	}
}

// ScopeStats are a scope's counters, copied at one moment. Live and Peak
// count what the scope and its children take from the device, as Limit
// does: allocations as the pool rounds them, and reservations.
type ScopeStats struct {
	Live        int64 `json:"live"`        // bytes the scope and its children take now
	Peak        int64 `json:"peak"`        // the most Live has been
	Allocations int   `json:"allocations"` // live buffers the scope owns itself
	Children    int   `json:"children"`    // open child scopes
	Reserved    int64 `json:"reserved"`    // bytes of its reservation (Reserve)
	Limit       int64 `json:"limit"`       // its limit (Limit; 0: none)
	// LastUse orders Evictable scopes by recency, as eviction does: the
	// device's count of their opens, allocations and uses at this one's
	// latest. 0 for a scope that is not evictable.
	LastUse uint64 `json:"last_use,omitempty"`
	// Asleep: the scope is asleep, or inside a Sleepable scope that is
	// (Scope.Sleep): its buffers hold no device memory until Wake.
	Asleep bool `json:"asleep,omitempty"`
}

// Stats returns the scope's counters; zero for a nil or zero Scope.
func (s *Scope) Stats() ScopeStats {
	if !s.valid() {
		return ScopeStats{}
	}
	st := s.s.Stats()
	return ScopeStats{Live: st.Live, Peak: st.Peak, Allocations: st.Allocations, Children: st.Children,
		Reserved: st.Reserved, Limit: st.Limit, LastUse: st.LastUse, Asleep: st.Asleep}
}

// String describes the counters in a line a person reads.
func (s ScopeStats) String() string {
	str := fmt.Sprintf("live %s (peak %s), %s, %s", units.FormatBytes(s.Live),
		units.FormatBytes(s.Peak), units.Count(s.Allocations, "buffer"), units.Count(s.Children, "child", "children"))
	if s.Reserved > 0 {
		str += ", reserved " + units.FormatBytes(s.Reserved)
	}
	if s.Limit > 0 {
		str += ", limit " + units.FormatBytes(s.Limit)
	}
	if s.Asleep {
		str += ", asleep"
	}
	return str
}
