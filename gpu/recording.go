package gpu

import (
	"context"
	"io"
	"sync"

	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/pool"
)

// A Recording writes every allocation and free of a device's pool as a
// trace (docs/trace-format.md), which `gpumem replay` replays and
// `gpumem plot` draws: a user's own workload, to tune the pool on.
type Recording struct {
	dev *Device

	// stopping serializes Stop. Stop gives the device's external cache back
	// (holdExternal) under it and not under mu: the cache's owner may hold its
	// own lock while a free it makes reaches note, which takes mu.
	stopping sync.Mutex

	mu      sync.Mutex // protects the fields below
	w       *trace.Writer
	err     error
	stopped bool
}

var errRecording = prefixed.Errorf("gpu", "the device is recording already")

// StartRecording starts writing the device's allocations and frees to w, in
// the shape of pprof.StartCPUProfile: one recording per device at a time,
// until Stop. It records at the pool: a reservation is one allocation, and
// what scopes allocate inside it is not in the trace. Each allocation names
// the scope that made it, by the path its Summary and Snapshot show
// (scopes that C libraries allocate in, through gpu/capi or libgpuscope,
// too), so that `gpumem plot` stacks memory by scope.
func (d *Device) StartRecording(w io.Writer) (*Recording, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	if w == nil {
		return nil, prefixed.Errorf("gpu", "StartRecording(nil)")
	}
	r := &Recording{dev: d, w: trace.NewWriter(w)}
	if !d.recording.CompareAndSwap(nil, r) {
		return nil, errRecording
	}
	r.err = r.w.WriteHeader()
	d.holdExternal(true) // what a library frees reaches the pool, and the recording
	d.pool.Observe(r.note)
	d.sleep.observe(r.note)
	return r, nil
}

// scoped is the context a scope's allocations give the pool (package
// scope's allocContext): it names the scope that allocates.
type scoped interface{ ScopePath() string }

// note writes one event: an allocation with the path of the scope that
// made it, which its context names.
func (r *Recording) note(ctx context.Context, alloc bool, b pool.Block) {
	ev := trace.Event{Action: trace.Free, Addr: uint64(b.Ptr()), Size: b.Size(), Stream: uint64(b.Stream())}
	if alloc {
		ev.Action = trace.Alloc
		if s, ok := ctx.(scoped); ok {
			ev.Scope = s.ScopePath() // before the lock: other allocations need not wait for it
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil && !r.stopped {
		r.err = r.w.Write(ev)
	}
}

// Stop ends the recording, flushes what it wrote and returns the first
// error writing it met. Stop is idempotent, and touches only its own
// recording: a second Stop leaves the device's next recording running.
func (r *Recording) Stop() error {
	r.stopping.Lock()
	defer r.stopping.Unlock()
	r.mu.Lock()
	first := !r.stopped
	r.stopped = true
	r.mu.Unlock()
	if first {
		// Only the first Stop clears the device's observer, and no other
		// recording can start before the swap below: the observer is ours.
		r.dev.pool.Observe(nil)
		r.dev.sleep.observe(nil)
		r.dev.holdExternal(false)
		r.dev.recording.CompareAndSwap(r, nil)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if first {
		if err := r.w.Flush(); r.err == nil {
			r.err = err
		}
	}
	if r.err != nil {
		return prefixed.Wrap("gpu", r.err, "writing the recording")
	}
	return nil
}
