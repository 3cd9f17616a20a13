package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// A cap on the device's memory can change while the program runs, as with
// PyTorch's set_per_process_memory_fraction: lowering it gives back what
// the cache holds, keeps what is live, and refuses growth past it.
func ExampleDevice_SetMaxReserved() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	weights, err := dev.NewScope()
	if err != nil {
		panic(err)
	}
	defer weights.Close()
	if _, err := weights.Alloc(32 << 20); err != nil {
		panic(err)
	}
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(64 << 20)
		return err
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("before:", gpu.Bytes(dev.Stats().Allocated), "allocated,", gpu.Bytes(dev.Stats().Reserved), "reserved")
	if err := dev.SetMaxReserved(48 << 20); err != nil {
		panic(err)
	}
	fmt.Println("capped at 48 MiB:", gpu.Bytes(dev.Stats().Allocated), "allocated,", gpu.Bytes(dev.Stats().Reserved), "reserved")
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(32 << 20)
		return err
	})
	fmt.Println("32 MiB more fails:", errors.Is(err, gpu.ErrOutOfMemory))
	// Output:
	// before: 32.00 MiB allocated, 100.00 MiB reserved
	// capped at 48 MiB: 32.00 MiB allocated, 32.00 MiB reserved
	// 32 MiB more fails: true
}

func TestDeviceCapRefusesBadValuesAndAClosedDevice(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(1 << 30))
	require.NoError(t, err)
	require.ErrorIs(t, dev.SetMaxReserved(-1), gpu.ErrInvalidSize)
	assert.Zero(t, dev.MaxReserved(), "a refused cap changes nothing")
	require.NoError(t, dev.SetMaxReservedFraction(0.5))
	assert.Equal(t, int64(512<<20), dev.MaxReserved())
	require.Error(t, dev.SetMaxReservedFraction(2))
	require.NoError(t, dev.Close())
	require.ErrorIs(t, dev.SetMaxReserved(1<<20), gpu.ErrDeviceClosed)
	var zero gpu.Device
	require.Error(t, zero.SetMaxReserved(1<<20))
	assert.Zero(t, zero.MaxReserved())
}
