package gpu

import (
	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/pool"
)

// The drivers' interfaces are the pool's, method for method. A drift would
// silently break the device (the pool finds an EventSource by a type
// assertion), so it is a compile error here, where both are in view.
// PageMapper needs no check: both packages alias vmm.PageMapper.
var (
	_ pool.Source      = driver.Driver(nil)
	_ pool.EventSource = driver.Driver(nil)
)
