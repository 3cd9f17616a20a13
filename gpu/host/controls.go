package host

import (
	"fmt"
	"sync"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/hostctl"
)

// handOver makes the hand-over of the driver's test controls happen once.
var handOver sync.Once

// handOverControls gives the driver's test controls to internal/hostctl,
// where this project's tests reach them; they are not part of this
// package's API. New calls it, so that loading the package does nothing
// (no init) and the controls are there before any driver they act on.
func handOverControls() {
	handOver.Do(func() {
		hostctl.Enqueue = func(d driver.Driver, stream uintptr, fn func() error) error {
			return asHost(d).enqueue(stream, fn)
		}
		hostctl.Hold = func(d driver.Driver, stream uintptr) (func(), error) { return asHost(d).hold(stream) }
		hostctl.Used = func(d driver.Driver) int64 { return asHost(d).usedBytes() }
		hostctl.Handles = func(d driver.Driver) (int, int, int) { return asHost(d).handles() }
	})
}

// asHost returns d as a host driver; anything else is a test's mistake.
func asHost(d driver.Driver) *Driver {
	h, ok := d.(*Driver)
	if !ok {
		panic(fmt.Sprintf("host: %T is not a host driver", d))
	}
	return h
}
