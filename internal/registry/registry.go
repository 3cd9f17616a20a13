// Package registry is the one piece of process-wide state: the devices open
// now, the scopes a device's Close found open, the release errors no
// caller could receive, and what a leak check reported already, so that
// gputest can look for leaks across all devices and report each once. Package gpu writes it; gputest (and gpu's tests) read it. It
// holds gpu's values as they are; a reader names their type when it takes
// them ([Snapshots], [TakeForcedCloses]).
package registry

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Device is an open device as the registry sees it.
type Device struct {
	// Snapshot returns the device's snapshot (a *gpu.Snapshot).
	Snapshot func() (any, error)
	// RecordStacks turns the recording of allocation stacks on or off.
	RecordStacks func(on bool)
}

type forcedClose struct {
	device string
	scope  any // a gpu.ScopeSnapshot
}

type droppedError struct {
	device string
	err    error
}

var state struct {
	mu       sync.Mutex // protects the fields below but stacks
	devices  []*Device
	forced   []forcedClose  // scopes that Device.Close closed, until taken
	dropped  []droppedError // release errors no caller could receive, until taken
	reported map[any]bool   // what a leak check reported, by the check's keys
	stacks   atomic.Bool
}

// Register adds an open device, and sets its recording of stacks as
// [SetRecordStacks] last said.
func Register(d *Device) {
	state.mu.Lock()
	defer state.mu.Unlock()
	d.RecordStacks(state.stacks.Load())
	state.devices = append(state.devices, d)
}

// Unregister removes a device that is closed.
func Unregister(d *Device) {
	state.mu.Lock()
	defer state.mu.Unlock()
	if i := slices.Index(state.devices, d); i >= 0 {
		state.devices = slices.Delete(state.devices, i, i+1)
	}
}

// SetRecordStacks turns the recording of stacks on or off for every device
// open now and later.
func SetRecordStacks(on bool) {
	state.mu.Lock()
	defer state.mu.Unlock()
	state.stacks.Store(on)
	for _, d := range state.devices {
		d.RecordStacks(on)
	}
}

// Snapshots returns a snapshot, of type S, of every device open now, oldest
// first; a device whose snapshot fails (it is closing) is left out.
func Snapshots[S any]() []S {
	state.mu.Lock()
	devices := slices.Clone(state.devices)
	state.mu.Unlock()
	var out []S
	for _, d := range devices {
		if snap, err := d.Snapshot(); err == nil {
			out = append(out, snap.(S))
		}
	}
	return out
}

// RecordForcedClose remembers scopes that the Close of the device named
// found open: a leak, even though the memory went back.
func RecordForcedClose[S any](device string, scopes []S) {
	state.mu.Lock()
	defer state.mu.Unlock()
	for _, s := range scopes {
		state.forced = append(state.forced, forcedClose{device, s})
	}
}

// TakeForcedCloses returns, and forgets, the scopes recorded by
// [RecordForcedClose] of the devices named, or of every device where none
// is. The other devices' stay for their own check.
func TakeForcedCloses[S any](devices ...string) []S {
	state.mu.Lock()
	defer state.mu.Unlock()
	var out []S
	state.forced = take(state.forced, devices, func(f forcedClose) string { return f.device },
		func(f forcedClose) { out = append(out, f.scope.(S)) })
	return out
}

// RecordDroppedError remembers an error of releasing memory on the device
// named that no caller could receive.
func RecordDroppedError(device string, err error) {
	state.mu.Lock()
	defer state.mu.Unlock()
	state.dropped = append(state.dropped, droppedError{device, err})
}

// TakeDroppedErrors returns, and forgets, the errors [RecordDroppedError]
// remembered of the devices named, or of every device where none is. The
// other devices' stay for their own check.
func TakeDroppedErrors(devices ...string) []error {
	state.mu.Lock()
	defer state.mu.Unlock()
	var out []error
	state.dropped = take(state.dropped, devices, func(d droppedError) string { return d.device },
		func(d droppedError) { out = append(out, d.err) })
	return out
}

// take hands each record of the devices named (every record where none
// is) to taken, in order, and returns the others. Called with state.mu held.
func take[R any](records []R, devices []string, device func(R) string, taken func(R)) []R {
	kept := records[:0]
	for _, r := range records {
		if len(devices) == 0 || slices.Contains(devices, device(r)) {
			taken(r)
		} else {
			kept = append(kept, r)
		}
	}
	return kept
}

// MarkReported remembers keys of what a leak check reported (scopes,
// buffers, resources, under keys of the checker's choosing), so that a
// later check can leave them out: a leak is reported once.
func MarkReported(keys []any) {
	state.mu.Lock()
	defer state.mu.Unlock()
	if state.reported == nil {
		state.reported = map[any]bool{}
	}
	for _, k := range keys {
		state.reported[k] = true
	}
}

// Reported returns a copy of the keys [MarkReported] remembered.
func Reported() map[any]bool {
	state.mu.Lock()
	defer state.mu.Unlock()
	return maps.Clone(state.reported)
}
