// Package registry is the one piece of process-wide state: the devices open
// now, the scopes a device's Close found open, the release errors no
// caller could receive, and what a leak check reported already, so that
// gputest can look for leaks across all devices and report each once. Package gpu writes it; gputest (and gpu's tests) read it. It
// holds gpu's values as they are; a reader names their type when it takes
// them ([Devices], [TakeForcedCloses]).
package registry

import (
	"maps"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// Device is an open device as the registry sees it.
type Device struct {
	Name     string   // as Claim gave it
	OpenedAt []string // where it was opened, "function file:line" innermost first
	ID       uint64   // set by Register: distinct for every device the process registers
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
	claimed  []string       // names Claim gave to devices not yet registered
	lastID   uint64
	stacks   atomic.Bool
}

// numbered matches a device's name that carries its number: "cuda:0".
var numbered = regexp.MustCompile(`:[0-9]+$`)

// Claim returns the name of a device about to be registered: name itself
// where it ends in its number ("cuda:0", which two devices over one GPU
// share), and otherwise name and the lowest number that no device
// registered or claimed has ("host" gives "host:0", then "host:1"), so
// that two devices of a kind never share a name.
// The name is the device's once Register is called with it.
func Claim(name string) string {
	state.mu.Lock()
	defer state.mu.Unlock()
	if !numbered.MatchString(name) {
		taken := slices.Clone(state.claimed)
		for _, d := range state.devices {
			taken = append(taken, d.Name)
		}
		for n := 0; ; n++ {
			if c := name + ":" + strconv.Itoa(n); !slices.Contains(taken, c) {
				name = c
				break
			}
		}
	}
	state.claimed = append(state.claimed, name)
	return name
}

// Register adds an open device, named by [Claim], gives it its ID, and
// sets its recording of stacks as [SetRecordStacks] last said.
func Register(d *Device) {
	state.mu.Lock()
	defer state.mu.Unlock()
	if i := slices.Index(state.claimed, d.Name); i >= 0 {
		state.claimed = slices.Delete(state.claimed, i, i+1)
	}
	state.lastID++
	d.ID = state.lastID
	d.RecordStacks(state.stacks.Load())
	state.devices = append(state.devices, d)
}

// Matches reports whether a device's name is among names: equal to one, or
// of the kind one names without a number ("host" is every "host:N").
func Matches(names []string, name string) bool {
	return slices.ContainsFunc(names, func(n string) bool {
		return n == name || !numbered.MatchString(n) && numbered.MatchString(name) && numbered.ReplaceAllString(name, "") == n
	})
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

// Open is a device open now, as a reader takes it: what the registry
// knows of it, and its snapshot of type S.
type Open[S any] struct {
	ID       uint64
	Name     string
	OpenedAt []string
	Snapshot S
}

// Devices returns every device open now, oldest first, with its
// snapshot; a device whose snapshot fails (it is closing) is left out.
func Devices[S any]() []Open[S] {
	state.mu.Lock()
	devices := slices.Clone(state.devices)
	state.mu.Unlock()
	var out []Open[S]
	for _, d := range devices {
		if snap, err := d.Snapshot(); err == nil {
			out = append(out, Open[S]{d.ID, d.Name, d.OpenedAt, snap.(S)})
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
		if len(devices) == 0 || Matches(devices, device(r)) {
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
