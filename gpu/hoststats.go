package gpu

import (
	"fmt"

	"github.com/gpuscope/gpuscope/internal/units"
)

// HostStats are the counters of a device's page-locked host memory
// ([AllocHost]), copied at one moment. Byte counts are of blocks as the
// device's cache of page-locked memory rounds them (to four sizes per
// doubling, at least 4 KiB). It marshals to JSON with snake_case names.
type HostStats struct {
	// Now.
	Allocated    int64 `json:"allocated"`     // bytes in live HostSlices
	ActiveBlocks int64 `json:"active_blocks"` // live HostSlices
	Cached       int64 `json:"cached"`        // bytes of blocks kept for reuse, Pending among them (EmptyCache returns them)
	CachedBlocks int64 `json:"cached_blocks"` // blocks kept for reuse
	Pending      int64 `json:"pending"`       // the part of Cached that stream work queued on it may still use: reused once it has completed

	// Totals, since the device was opened.
	Hits        int64 `json:"hits"`         // AllocHost calls served from the cache, with no driver call
	Misses      int64 `json:"misses"`       // AllocHost calls that allocated from the driver
	DriverFrees int64 `json:"driver_frees"` // blocks given back to the driver: EmptyCache, Close, an allocation it had no room for
}

// String describes the counters in a line a person reads.
func (s HostStats) String() string {
	return fmt.Sprintf("page-locked: allocated %s in %d blocks, cached %s in %d blocks (%s pending); %d hits, %d misses",
		units.FormatBytes(s.Allocated), s.ActiveBlocks, units.FormatBytes(s.Cached), s.CachedBlocks,
		units.FormatBytes(s.Pending), s.Hits, s.Misses)
}

// HostStats returns the counters of the device's page-locked host memory;
// zero for a nil or zero Device.
func (d *Device) HostStats() HostStats {
	if !d.valid() {
		return HostStats{}
	}
	d.host.mu.Lock()
	defer d.host.mu.Unlock()
	return d.host.stats
}
