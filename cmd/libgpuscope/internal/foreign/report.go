package foreign

import (
	"encoding/json"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/ccall"
)

// stats is what Stats marshals: the device's counters, and the process's
// failed calls.
type stats struct {
	gpu.Stats
	Device    string `json:"device,omitempty"`         // as gpu.Device.String says, such as "cuda:0 (NVIDIA H200)"
	Scope     string `json:"scope,omitempty"`          // the path of the scope current on the device
	LastEnd   string `json:"last_scope_end,omitempty"` // what the last gpuscope_scope_end on it found still live
	Error     string `json:"error,omitempty"`          // why there are no counters: the device could not be opened
	PairHits  int64  `json:"c_pair_hits"`              // pairs the pair cache served without crossing into Go: not in allocs and frees
	Failures  int64  `json:"c_failures"`               // calls from C that failed, in the process
	LastError string `json:"c_last_error,omitempty"`   // the last one's message
}

// Stats returns device i's counters (gpu.Stats) as JSON, with the path of
// the scope current on it and the process's failed calls. A device that
// cannot be opened has an error instead of counters.
func Stats(i int) []byte {
	var st stats
	if d, err := deviceAt(i); err != nil {
		st.Error = err.Error()
	} else {
		st.PairHits = pairHits(i)
		// d.gpu.Stats has the pair cache give back what it holds first.
		st.Stats, st.Device, st.Scope = d.gpu.Stats(), d.gpu.String(), d.current.Load().scope.Path()
		if p := d.lastEnd.Load(); p != nil {
			st.LastEnd = *p
		}
	}
	st.Failures, st.LastError = ccall.Failures()
	b, err := json.Marshal(st)
	if err != nil {
		panic("foreign: bug: stats do not marshal: " + err.Error())
	}
	return b
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
