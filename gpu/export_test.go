package gpu

import "github.com/gpuscope/gpuscope/gpu/driver"

// OpenDriver opens a device over drv, for tests that stand a driver of
// their own in for a GPU.
func OpenDriver(drv driver.Driver, name string) (*Device, error) {
	return newDevice(drv, name, deviceOptions{})
}
