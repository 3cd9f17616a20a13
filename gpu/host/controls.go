package host

import (
	"fmt"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/hostctl"
)

// The driver's test controls go to internal/hostctl, where this project's
// tests reach them; they are not part of this package's API. The init only
// assigns functions: it opens nothing and starts nothing.
func init() {
	hostctl.Enqueue = func(d driver.Driver, stream uintptr, fn func() error) error {
		return asHost(d).enqueue(stream, fn)
	}
	hostctl.Hold = func(d driver.Driver, stream uintptr) (func(), error) { return asHost(d).hold(stream) }
	hostctl.Used = func(d driver.Driver) int64 { return asHost(d).usedBytes() }
	hostctl.Handles = func(d driver.Driver) (int, int, int) { return asHost(d).handles() }
}

// asHost returns d as a host driver; anything else is a test's mistake.
func asHost(d driver.Driver) *Driver {
	h, ok := d.(*Driver)
	if !ok {
		panic(fmt.Sprintf("host: %T is not a host driver", d))
	}
	return h
}
