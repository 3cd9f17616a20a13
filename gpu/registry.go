package gpu

import (
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/scope"
)

// The one piece of process-wide state: the devices open now, so that
// gputest can look for leaks across all of them.
var registry struct {
	mu      sync.Mutex // protects devices and forced
	devices []*Device
	forced  []ScopeInfo // scopes that Device.Close closed, until gputest takes them
	dropped []error     // release errors no caller could receive, until gputest takes them
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

// OpenDevices returns the devices open now, oldest first.
func OpenDevices() []*Device {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return append([]*Device(nil), registry.devices...)
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
func recordForcedClose(scopes []ScopeInfo) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	registry.forced = append(registry.forced, scopes...)
}

// TakeForcedCloses returns, and forgets, the scopes that Device.Close found
// open since the last call, as they were just before it closed them. A
// device closed with scopes open frees their memory, so no later look at the
// device shows the leak; gputest reports these instead.
func TakeForcedCloses() []ScopeInfo {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	out := registry.forced
	registry.forced = nil
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

// ScopeInfo describes an open scope, for leak reports.
type ScopeInfo struct {
	ID      uint64 // unique in the process
	Name    string
	Device  string
	Path    string
	Live    int64     // bytes live in it and its children
	Stack   []uintptr // where it was opened, if recorded
	Buffers []BufferInfo
}

// BufferInfo describes a live buffer, for leak reports.
type BufferInfo struct {
	Key   BufferKey // tells this buffer from any other, also one at the same address later
	Ptr   uintptr
	Size  int64
	Stack []uintptr // where it was allocated, if recorded
}

// BufferKey identifies a buffer for as long as anyone holds the key: a map
// of keys is how gputest remembers buffers to ignore. It is comparable.
type BufferKey struct{ a *scope.Allocation }

// OpenScopes describes every scope open on the device now, parents first,
// with the buffers each owns.
func (d *Device) OpenScopes() []ScopeInfo {
	if !d.valid() {
		return nil
	}
	var out []ScopeInfo
	for _, s := range d.tree.Scopes() {
		info := ScopeInfo{ID: s.ID(), Name: s.Name(), Device: d.name, Path: s.Path(), Live: s.Stats().Live, Stack: s.Stack()}
		for _, a := range s.Allocations() {
			info.Buffers = append(info.Buffers, BufferInfo{Key: BufferKey{a}, Ptr: a.Ptr(), Size: a.Size(), Stack: a.Stack()})
		}
		out = append(out, info)
	}
	return out
}
