//go:build cuda

package gpu

import (
	"fmt"

	"github.com/gpuscope/gpuscope/gpu/cuda"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// Open opens CUDA device i: a device with its own caching pool, whose
// arenas map pages (cuMemCreate and cuMemMap). A bad ordinal fails with
// ErrNoDevice.
func Open(i int, opts ...DeviceOption) (*Device, error) {
	o, err := buildDeviceOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.hostMemory != 0 {
		return nil, prefixed.Errorf("gpu", "HostMemory is for OpenHost; a GPU's memory is what it has (MaxReserved or MaxReservedFraction caps what its pool takes)")
	}
	return openGPU(i, o)
}

// openGPU is Open with its options built.
func openGPU(i int, o deviceOptions) (*Device, error) {
	drv, err := cuda.Open(i)
	if err != nil { // a bad ordinal is ErrNoDevice
		return nil, deviceError(err)
	}
	return newDevice(drv, fmt.Sprintf("cuda:%d", i), o)
}

// DeviceInfo describes a CUDA device.
type DeviceInfo struct {
	Ordinal     int
	Name        string
	TotalMemory int64
}

// Devices lists the CUDA devices.
func Devices() ([]DeviceInfo, error) {
	n, err := cuda.Count()
	if err != nil {
		return nil, deviceError(err)
	}
	if n == 0 {
		return nil, prefixed.Kind("gpu", ErrNoDevice, "the CUDA driver reports no device")
	}
	out := make([]DeviceInfo, n)
	for i := range out {
		name, total, err := cuda.Info(i)
		if err != nil {
			return nil, deviceError(err)
		}
		out[i] = DeviceInfo{Ordinal: i, Name: name, TotalMemory: total}
	}
	return out, nil
}

// CUDA reports whether this build has CUDA support (-tags cuda).
// [OpenDefault] opens GPU 0 where it does and the machine has one, and
// host memory otherwise.
const CUDA = true
