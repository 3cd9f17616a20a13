package gpu

import (
	"runtime"

	"github.com/gpuscope/gpuscope/internal/extcache"
	"github.com/gpuscope/gpuscope/internal/registry"
)

// register adds d to the process's registry of open devices
// (internal/registry), where gputest looks for leaks, with where it was
// opened. d's name is registry.Claim's.
func register(d *Device) {
	d.registered = &registry.Device{
		Name:         d.name,
		Snapshot:     func() (any, error) { return d.Snapshot() },
		RecordStacks: d.tree.RecordStacks,
	}
	var pcs [32]uintptr // always: a device opens seldom, and gputest tells by it which test opened it
	d.registered.OpenedAt = frames(pcs[:runtime.Callers(1, pcs[:])])
	registry.Register(d.registered)
}

func unregister(d *Device) {
	registry.Unregister(d.registered)
	extcache.Detach(d)
}

// RecordStacks turns on or off, for every device open now and later, the
// recording of the Go stack where each buffer is allocated and each scope
// opened, which leak reports show. It costs a runtime.Callers per
// allocation (measured in docs/leaks.md).
func RecordStacks(on bool) { registry.SetRecordStacks(on) }
