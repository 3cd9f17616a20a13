//go:build !cuda

package gpu

import "github.com/gpuscope/gpuscope/internal/prefixed"

// Open opens CUDA device i. This build has no CUDA support: it always fails
// with ErrNoDevice. Build with -tags cuda (docs/gpu-validation.md says how).
func Open(i int, opts ...DeviceOption) (*Device, error) { return openGPU(i, deviceOptions{}) }

// openGPU is Open with its options built: no GPU in this build.
func openGPU(int, deviceOptions) (*Device, error) {
	return nil, prefixed.Kind("gpu", ErrNoDevice, "gpuscope was built without CUDA support; build with -tags cuda "+
		"(scripts/cuda-sdk.sh fetches what the build needs), or use gpu.OpenHost or gpu.OpenDefault")
}

// DeviceInfo describes a CUDA device.
type DeviceInfo struct {
	Ordinal     int
	Name        string
	TotalMemory int64
}

// Devices lists the CUDA devices. This build has none: it returns
// ErrNoDevice.
func Devices() ([]DeviceInfo, error) {
	return nil, prefixed.Kind("gpu", ErrNoDevice, "gpuscope was built without CUDA support; build with -tags cuda")
}

// CUDA reports whether this build has CUDA support (-tags cuda).
// [OpenDefault] opens GPU 0 where it does and the machine has one, and
// host memory otherwise.
const CUDA = false
