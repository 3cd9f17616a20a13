package gpu

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/scope"
)

// The one piece of process-wide state: the devices open now, so that
// gputest can look for leaks across all of them.
var registry struct {
	mu      sync.Mutex // protects devices and forced
	devices []*Device
	forced  []ScopeSnapshot // scopes that Device.Close closed, until gputest takes them
	dropped []error         // release errors no caller could receive, until gputest takes them
	stacks  atomic.Bool
}

func register(d *Device) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	d.tree.RecordStacks(registry.stacks.Load())
	registry.devices = append(registry.devices, d)
}

func unregister(d *Device) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for i, x := range registry.devices {
		if x == d {
			registry.devices = append(registry.devices[:i], registry.devices[i+1:]...)
			return
		}
	}
}

// Snapshots returns a Snapshot of every device open in the process, oldest
// first: what gputest's checks look at.
func Snapshots() []*Snapshot {
	registry.mu.Lock()
	devices := append([]*Device(nil), registry.devices...)
	registry.mu.Unlock()
	var out []*Snapshot
	for _, d := range devices {
		if snap, err := d.Snapshot(); err == nil {
			out = append(out, snap)
		}
	}
	return out
}

// RecordStacks turns on or off, for every device open now and later, the
// recording of the Go stack where each buffer is allocated and each scope
// opened, which leak reports show. It costs a runtime.Callers per
// allocation (measured in docs/leaks.md).
func RecordStacks(on bool) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	registry.stacks.Store(on)
	for _, d := range registry.devices {
		d.tree.RecordStacks(on)
	}
}

// recordForcedClose remembers the scopes a device's Close found open, with
// their buffers: a leak, even though the memory went back.
func recordForcedClose(scopes []ScopeSnapshot) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	registry.forced = append(registry.forced, scopes...)
}

// TakeForcedCloses returns, and forgets, the scopes that Device.Close found
// open since the last call, as they were just before it closed them: those
// of the devices named (see Device.Name), or of every device where none is.
// The other devices' stay for their own check. A device closed with scopes
// open frees their memory, so no later look at the device shows the leak;
// gputest reports these instead.
func TakeForcedCloses(devices ...string) []ScopeSnapshot {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if len(devices) == 0 {
		out := registry.forced
		registry.forced = nil
		return out
	}
	var out, kept []ScopeSnapshot
	for _, s := range registry.forced {
		if slices.Contains(devices, s.Device) {
			out = append(out, s)
		} else {
			kept = append(kept, s)
		}
	}
	registry.forced = kept
	return out
}

func recordDroppedError(err error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	registry.dropped = append(registry.dropped, err)
}

// TakeDroppedErrors returns, and forgets, the errors of releasing memory
// that no caller could receive (see [OnReleaseError]) on devices without an
// OnReleaseError. gputest reports them.
func TakeDroppedErrors() []error {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	out := registry.dropped
	registry.dropped = nil
	return out
}

// BufferKey identifies a buffer: a map of keys is how gputest remembers
// buffers to ignore. It is comparable, and does not travel through JSON.
// It is what [Buffer.Key] returns.
type BufferKey struct{ ref scope.Ref }
