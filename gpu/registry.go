package gpu

import (
	"sync"
	"sync/atomic"
)

// The one piece of process-wide state: the devices open now, so that
// gputest can look for leaks across all of them.
var registry struct {
	mu      sync.Mutex // protects devices
	devices []*Device
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
	Ptr   uintptr
	Size  int64
	Stack []uintptr // where it was allocated, if recorded
}

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
			info.Buffers = append(info.Buffers, BufferInfo{Ptr: a.Ptr(), Size: a.Size(), Stack: a.Stack()})
		}
		out = append(out, info)
	}
	return out
}
