package gpu

import (
	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/pool"
)

// The drivers' interfaces are the pool's, method for method. A drift would
// silently turn page mapping off (the pool finds a PageMapper by a type
// assertion), so it is a compile error here, where both are in view.
var (
	_ pool.Source      = driver.Driver(nil)
	_ pool.EventSource = driver.Driver(nil)
	_ pool.PageMapper  = driver.PageMapper(nil)
)
