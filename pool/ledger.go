package pool

import "sync/atomic"

// ledger counts what a pool holds from its source, against its cap, and the
// calls that changed it. Its plain fields are guarded by the pool's mu.
type ledger struct {
	limit       atomic.Int64 // MaxReserved in bytes; 0 means none. Changed under mu and growMu (SetMaxReserved)
	total       int64        // the device's bytes, as MemInfo said when the pool was made; 0: unknown
	reservedNow atomic.Int64 // copy of reserved for lock-free reads

	reserved     int64
	peakReserved int64
	segments     int64
	sourceAllocs int64
	sourceFrees  int64
	handles      int64 // handles held, mapped or idle
	growths      int64
	pagesMapped  int64
	pagesMoved   int64
	ooms         int64
	retries      int64
}

// overLimit reports whether reserving n more bytes breaks the limit.
func (l *ledger) overLimit(n int64) bool {
	limit := l.limit.Load()
	return limit > 0 && l.reserved+n > limit
}

// limitError returns the out-of-memory error of the limit where reserving
// n more bytes would break it.
func (l *ledger) limitError(n int64) error {
	if l.overLimit(n) {
		return sourceOOM{}
	}
	return nil
}

// tooLarge reports whether r bytes can never be reserved: beyond the
// device or the limit, whatever the pool releases.
func (l *ledger) tooLarge(r int64) bool {
	limit := l.limit.Load()
	return l.total > 0 && r > l.total || limit > 0 && r > limit
}

// budget is the most the pool may hold: its limit, else the device's
// memory; 0 where neither is known.
func (l *ledger) budget() int64 {
	budget := l.total
	if limit := l.limit.Load(); limit > 0 && (budget <= 0 || limit < budget) {
		budget = limit
	}
	return budget
}

// addReserved counts n more bytes held (fewer, where n is negative).
func (l *ledger) addReserved(n int64) {
	l.reserved += n
	l.reservedNow.Store(l.reserved)
	if l.reserved > l.peakReserved {
		l.peakReserved = l.reserved
	}
}

// fill copies the counters into st.
func (l *ledger) fill(st *Stats) {
	st.Reserved = l.reserved
	st.PeakReserved = l.peakReserved
	st.Segments = l.segments
	st.SourceAllocs = l.sourceAllocs
	st.SourceFrees = l.sourceFrees
	st.Growths = l.growths
	st.PagesMapped = l.pagesMapped
	st.PagesMoved = l.pagesMoved
	st.OOMs = l.ooms
	st.Retries = l.retries
}
