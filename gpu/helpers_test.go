package gpu_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/pool"
)

func openHost(t testing.TB, opts ...gpu.DeviceOption) *gpu.Device {
	t.Helper()
	dev, err := gpu.OpenHost(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return dev
}

// testDevice opens the device the semantics tests run on: GPU 0 in a build
// with CUDA support, the host-memory device otherwise. A capacity > 0 caps
// its memory: the host device's size, or the GPU pool's limit.
func testDevice(t testing.TB, capacity int64) *gpu.Device {
	t.Helper()
	if !gpu.CUDA {
		if capacity > 0 {
			return openHost(t, gpu.HostMemory(capacity))
		}
		return openHost(t)
	}
	var opts []gpu.DeviceOption
	if capacity > 0 {
		opts = append(opts, gpu.PoolOptions(pool.MaxReserved(capacity)))
	}
	dev, err := gpu.Open(0, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return dev
}

// openTestHost opens a host device, closed when the test ends, whose driver
// the test can make fail and hold busy (gputest.OpenFaulty).
func openTestHost(t testing.TB, opts ...gpu.DeviceOption) (*gpu.Device, *gputest.Faults) {
	t.Helper()
	dev, drv, err := gputest.OpenFaulty(0, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return dev, drv
}
