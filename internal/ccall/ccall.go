// Package ccall holds what the calls from C into gpuscope share, whether
// through libgpuscope's entry points or gpu/capi's context form: the check
// of a size that C passes, and the count of the calls that failed,
// process-wide, with the last one's message. A C caller that got NULL or a
// negative result cannot be handed an error: it reads why on standard error
// and, through libgpuscope, in gpuscope_stats.
package ccall

import (
	"fmt"
	"math"
	"os"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// Size converts a size that C passes (a size_t) to bytes, refusing what
// int64 cannot hold.
func Size(n uint64) (int64, error) {
	if n > math.MaxInt64 {
		return 0, prefixed.Kind("gpu", errdefs.InvalidSize, "%d bytes: more than any device holds", n)
	}
	return int64(n), nil
}

var failures struct {
	n       atomic.Int64
	printed atomic.Int64
	quiet   atomic.Bool
	last    atomic.Pointer[string]
}

// MaxPrinted is how many failures are written to standard error; the rest
// are counted.
const MaxPrinted = 100

// Fail records the failure of the C call named call, and writes it to
// standard error.
func Fail(call string, err error) { record(call, err, true) }

// FailTold is Fail for a call that tells its caller it failed (by what it
// returns, and the message where the caller can read it): under
// SetQuiet(true) it is recorded and not written.
func FailTold(call string, err error) { record(call, err, !failures.quiet.Load()) }

// SetQuiet makes FailTold write nothing (on), for a caller that raises each
// failure it is told of with the message, as a binding in another
// language does; or write as Fail does (off, as at the start).
func SetQuiet(on bool) { failures.quiet.Store(on) }

func record(call string, err error, print bool) {
	msg := call + ": " + err.Error()
	failures.last.Store(&msg)
	failures.n.Add(1)
	if !print {
		return
	}
	switch n := failures.printed.Add(1); {
	case n < MaxPrinted:
		fmt.Fprintln(os.Stderr, "gpuscope:", msg)
	case n == MaxPrinted:
		fmt.Fprintln(os.Stderr, "gpuscope:", msg, "(further failures are counted, not printed)")
	}
}

// Failures returns how many calls failed in the process, and the last
// one's message ("" where none did).
func Failures() (n int64, last string) {
	n = failures.n.Load()
	if p := failures.last.Load(); p != nil {
		last = *p
	}
	return n, last
}
