package gpu

import (
	"expvar"
	"fmt"
	"log/slog"

	"github.com/gpuscope/gpuscope/pool"
)

// Stats are a device's memory counters: the pool's, and its open scopes.
type Stats struct {
	pool.Stats
	OpenScopes int // scopes open on the device
}

// String describes the counters in a line a person reads: what is in use,
// what the device holds for it, and the peaks.
func (s Stats) String() string {
	return fmt.Sprintf("allocated %s (peak %s), reserved %s (peak %s), cached %s; %d buffers live, %d scopes open",
		pool.FormatBytes(s.Allocated), pool.FormatBytes(s.PeakAllocated), pool.FormatBytes(s.Reserved),
		pool.FormatBytes(s.PeakReserved), pool.FormatBytes(s.Cached), s.ActiveBlocks, s.OpenScopes)
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
	return Stats{Stats: d.pool.Stats(), OpenScopes: len(d.tree.Scopes())}
}

// Var returns an expvar.Var whose String is the device's Stats as JSON, for
// expvar.Publish("gpu0", dev.Var()): /debug/vars then shows them.
func (d *Device) Var() expvar.Var {
	return expvar.Func(func() any { return d.Stats().Stats })
}

// ResetPeaks sets the device's peaks to what is allocated and reserved now,
// so that the next peaks are those of what runs next.
func (d *Device) ResetPeaks() {
	if d.valid() {
		d.pool.ResetPeaks()
	}
}
