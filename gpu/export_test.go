package gpu

import (
	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/hosttest"
)

// OpenDriver opens a device over drv, for tests that stand a driver of
// their own in for a GPU.
func OpenDriver(drv driver.Driver, name string, opts ...DeviceOption) (*Device, error) {
	o, err := buildDeviceOptions(opts)
	if err != nil {
		return nil, err
	}
	return newDevice(drv, name, o)
}

// OpenTestHost opens a device named "host", as OpenHost does, over a host
// driver of capacity bytes (DefaultHostMemory if 0) that the test can make
// fail and hold busy.
func OpenTestHost(capacity int64, opts ...DeviceOption) (*Device, *hosttest.Driver, error) {
	if capacity == 0 {
		capacity = DefaultHostMemory
	}
	drv, err := hosttest.New(capacity)
	if err != nil {
		return nil, nil, err
	}
	dev, err := OpenDriver(drv, "host", opts...)
	return dev, drv, err
}
