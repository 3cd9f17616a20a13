package foreign

import (
	"encoding/json"
	"errors"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/ccall"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// stats is what Stats marshals: the device's counters, and the process's
// failed calls.
type stats struct {
	gpu.Stats
	Device     string `json:"device,omitempty"`         // as gpu.Device.String says, such as "cuda:0 (NVIDIA H200)"
	Scope      string `json:"scope,omitempty"`          // the path of the calling thread's scope on the device
	LastEnd    string `json:"last_scope_end,omitempty"` // what the last gpuscope_scope_end on it found still live
	Error      string `json:"error,omitempty"`          // why there are no counters: the device could not be opened
	PairHits   int64  `json:"c_pair_hits"`              // allocations the pair cache served without crossing into Go: not in allocs
	PairAllocs int64  `json:"c_pair_allocs"`            // allocations through the entry points while the cache was on: its hits and misses
	PairLate   int64  `json:"c_pair_late"`              // blocks it handed back after a scope's end had freed them (nothing freed twice)
	Failures   int64  `json:"c_failures"`               // calls from C that failed, in the process
	LastError  string `json:"c_last_error,omitempty"`   // the last one's message
}

// Stats returns device i's counters (gpu.Stats) as JSON, with the path of
// the scope scope (the calling thread's; its root where it has ended) and
// the process's failed calls. A device that cannot be opened has an error
// instead of counters.
func Stats(i int, scope int64) []byte {
	var st stats
	if d, err := deviceAt(i); err != nil {
		st.Error = err.Error()
	} else {
		st.PairHits, st.PairAllocs = pairCounts(i)
		r, err := d.scopeOf(scope)
		if err != nil {
			r = d.root
		}
		// d.gpu.Stats has the pair cache give back what it holds first.
		st.Stats, st.Device, st.Scope = d.gpu.Stats(), d.gpu.String(), r.scope.Path()
		st.PairLate = lateReleases.Load()
		if p := d.lastEnd.Load(); p != nil {
			st.LastEnd = *p
		}
	}
	st.Failures, st.LastError = ccall.Failures()
	return marshal(st)
}

// marshal is json.Marshal of what cannot fail to marshal.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("foreign: bug: stats do not marshal: " + err.Error())
	}
	return b
}

// scopeStats is what ScopeStats marshals.
type scopeStats struct {
	Path string `json:"path"`
	gpu.ScopeStats
}

// ScopeStats returns the counters of the scope id begun from C
// (gpu.ScopeStats: its live bytes with its children's, its peak, its
// buffers) with its path, as JSON.
func ScopeStats(id int64) ([]byte, error) {
	r := lookup(id)
	if r == nil {
		return nil, prefixed.Wrap("gpu", errNoScope, "scope %d", id)
	}
	flushPairs(r.dev.index) // what the library freed into the cache is not the scope's
	return marshal(scopeStats{Path: r.scope.Path(), ScopeStats: r.scope.Stats()}), nil
}

// DeviceOf returns the index of the device of the scope id, open: a
// stream bound to it is a stream of that device.
func DeviceOf(id int64) (int, error) {
	r := lookup(id)
	if r == nil || r.ending.Load() {
		return 0, prefixed.Wrap("gpu", errNoScope, "scope %d", id)
	}
	return r.dev.index, nil
}

// IsOpen reports whether the scope id is open.
func IsOpen(id int64) bool {
	r := lookup(id)
	return r != nil && !r.ending.Load()
}

// Within reports whether the scope other is open, and whether the scope id
// was begun inside it, at any depth.
func Within(id, other int64) (open, inside bool) {
	o := lookup(other)
	if o == nil || o.ending.Load() {
		return false, false
	}
	r := lookup(id)
	if r == nil {
		return true, false
	}
	r.dev.mu.Lock() // which guards the records' tree
	defer r.dev.mu.Unlock()
	for p := r.parent; p != nil; p = p.parent {
		if p == o {
			return true, true
		}
	}
	return true, false
}

// Summary returns device i's Summary, or why there is none.
func Summary(i int) string {
	d, err := deviceAt(i)
	if err != nil {
		return err.Error() + "\n"
	}
	return d.gpu.Summary() // which has the pair cache give back what it holds first
}

// SetMaxReserved caps what device i's pool reserves (gpu.Device.SetMaxReserved).
func SetMaxReserved(i int, bytes int64) error {
	d, err := deviceAt(i)
	if err != nil {
		return err
	}
	return d.gpu.SetMaxReserved(bytes)
}

// EmptyCache gives what device i's pool caches back to the driver
// (gpu.Device.EmptyCache), or every open device's where i < 0, as
// PyTorch's empty_cache does.
func EmptyCache(i int) error {
	if i >= 0 {
		d, err := deviceAt(i)
		if err != nil {
			return err
		}
		return d.gpu.EmptyCache()
	}
	var errs []error
	for k := range devices.open {
		if d := openDeviceAt(k); d != nil {
			errs = append(errs, d.gpu.EmptyCache())
		}
	}
	return errors.Join(errs...)
}

// SetMemoryFraction caps what device i's pool reserves at fraction of the
// device's memory (gpu.Device.SetMaxReservedFraction), as PyTorch's
// set_per_process_memory_fraction asks. A fraction out of (0, 1] is
// refused here, in words that name no Go call: the caller made C's.
func SetMemoryFraction(i int, fraction float64) error {
	if !(fraction > 0 && fraction <= 1) {
		return prefixed.Kind("gpu", gpu.ErrInvalidSize, "a fraction of the device must be in (0, 1], not %v", fraction)
	}
	d, err := deviceAt(i)
	if err != nil {
		return err
	}
	return d.gpu.SetMaxReservedFraction(fraction)
}
