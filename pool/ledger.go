package pool

import (
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// ledger counts what a pool holds from its source, against its cap, and the
// calls that changed it. Its plain fields are guarded by mu, the pool's
// lock.
type ledger struct {
	mu          *sync.Mutex
	limit       atomic.Int64 // MaxReserved in bytes; 0 means none. Changed under mu and growMu (SetMaxReserved)
	total       int64        // the device's bytes, as MemInfo said when the pool was made; 0: unknown
	reservedNow atomic.Int64 // copy of reserved for lock-free reads

	// counts holds the Stats fields the ledger keeps: Reserved,
	// PeakReserved, Segments (classic ones), SourceAllocs, SourceFrees,
	// Growths, PagesMapped, PagesMoved, OOMs and Retries.
	counts  Stats
	handles int64 // handles held, mapped or idle
}

// overLimit reports whether reserving n more bytes breaks the limit.
func (l *ledger) overLimit(n int64) bool {
	limit := l.limit.Load()
	return limit > 0 && l.counts.Reserved+n > limit
}

// checkLimit returns the out-of-memory error of the limit where reserving
// n more bytes would break it. Called with mu not held.
func (l *ledger) checkLimit(n int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
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
	l.counts.Reserved += n
	l.reservedNow.Store(l.counts.Reserved)
	if l.counts.Reserved > l.counts.PeakReserved {
		l.counts.PeakReserved = l.counts.Reserved
	}
}

// fractionOf returns the cap that is fraction f, in (0, 1], of the device's
// total memory: at least one byte, so that a cap is never 0, which means
// none.
func (l *ledger) fractionOf(f float64) (int64, error) {
	if !(f > 0 && f <= 1) {
		return 0, prefixed.Kind("pool", ErrInvalidSize, "a fraction of the device must be in (0, 1], not %v", f)
	}
	if l.total <= 0 {
		return 0, prefixed.Errorf("pool", "a fraction of the device needs its total memory, and the source reported %d", l.total)
	}
	return max(int64(f*float64(l.total)), 1), nil
}
