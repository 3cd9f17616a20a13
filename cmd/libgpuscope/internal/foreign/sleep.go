package foreign

import (
	"context"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
)

// BeginSleepable is Begin for a scope whose memory can sleep
// (gpu.Sleepable): Sleep gives it back to the driver and Wake maps new
// memory at the same addresses, for every buffer libraries hold in it and
// in the scopes begun inside it. The pair cache keeps none of their blocks:
// a block it kept could be handed out while the scope sleeps.
func BeginSleepable(i int, parent int64, name string) (int64, error) {
	return begin(i, parent, name, true)
}

// Sleep puts the sleepable scope id to sleep (gpu.Scope.Sleep): keep
// keeps what its buffers hold, for Wake to give back; without it they wake
// as zeros.
func Sleep(id int64, keep bool) error {
	r, err := sleeper(id)
	if err != nil {
		return err
	}
	contents := gpu.DiscardContents
	if keep {
		contents = gpu.KeepContents
	}
	return r.scope.Sleep(context.Background(), contents)
}

// Wake wakes the sleepable scope id (gpu.Scope.Wake); where the device has
// no room it fails whole, the scope asleep still.
func Wake(id int64) error {
	r, err := sleeper(id)
	if err != nil {
		return err
	}
	return r.scope.Wake(context.Background())
}

// sleeper returns the open record id.
func sleeper(id int64) (*record, error) {
	r := lookup(id)
	if r == nil {
		return nil, prefixed.Wrap("gpu", errNoScope, "scope %d", id)
	}
	return r, nil
}

// held counts the buffers libraries hold in r and in its children on
// streams, and their bytes.
func (r *record) held() (n int, bytes int64) {
	tbl.each(func(e *entry) bool {
		if e.rec == r || e.rec.streamOf == r {
			n++
			bytes += e.buf.Size()
		}
		return false
	})
	return n, bytes
}

// linger is End(id, false) of a sleepable scope in which libraries still
// hold n buffers of bytes: nothing passes to the enclosing scope (its
// memory would leave the memory that sleeps), and the scope stays open
// under its id, no longer any thread's, so that it can sleep and wake, until
// End with freeLive. Called with r.dev.mu held.
func (r *record) linger(n int, bytes int64) {
	report := fmt.Sprintf("scope %q stays open, sleepable, with %s (%s) that libraries still hold: it ends with GPUSCOPE_FREE_LIVE",
		r.scope.Path(), units.Count(n, "buffer"), units.FormatBytes(bytes))
	r.dev.lastEnd.Store(&report)
}
