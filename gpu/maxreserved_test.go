package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// A cap that refuses says so first, and how to raise it; the device's
// free memory comes after, whether the cap was set at Open, as bytes or
// as a fraction, or while the program runs.
func TestACapThatRefusesSaysSoFirst(t *testing.T) {
	cases := []struct {
		name string
		open []gpu.DeviceOption
		set  func(*gpu.Device) error
	}{
		{"a fraction at Open", []gpu.DeviceOption{gpu.MaxReservedFraction(0.25)}, nil},
		{"bytes at Open", []gpu.DeviceOption{gpu.MaxReserved(16 << 20)}, nil},
		{"SetMaxReserved", nil, func(d *gpu.Device) error { return d.SetMaxReserved(16 << 20) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := openHost(t, append(c.open, gpu.HostMemory(64<<20))...)
			if c.set != nil {
				require.NoError(t, c.set(dev))
			}
			assert.Equal(t, int64(16<<20), dev.MaxReserved())
			err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				_, err := s.Alloc(20 << 20)
				return err
			}, gpu.Name("batch"))
			require.ErrorIs(t, err, gpu.ErrOutOfMemory)
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, `gpu: out of memory: the pool's cap of 16.00 MiB, which holds whole pages of 2.00 MiB, refused 20.00 MiB in scope "batch"`), msg)
			raise := strings.Index(msg, "raise it with Device.SetMaxReserved, or with the MaxReserved or MaxReservedFraction option at Open")
			free := strings.Index(msg, "the device has 64.00 MiB free of 64.00 MiB")
			assert.True(t, raise > 0 && free > raise, "how to raise the cap, then the device's free memory: %q", msg)
			assert.NotContains(t, msg, "has no room", "the device is not blamed")
			var oom *gpu.OOMError
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, int64(16<<20), oom.Device.Limit)
		})
	}
}

// A value that can never work is refused where it is given, with what
// would: a cap below one page of the pool (2 MiB on the host device), under
// which no allocation could fit, at Open as later.
func TestACapBelowOnePageIsRefusedWhereItIsGiven(t *testing.T) {
	_, err := gpu.OpenHost(gpu.MaxReserved(2<<20 - 1))
	require.ErrorIs(t, err, gpu.ErrInvalidSize)
	assert.EqualError(t, err, "gpu: invalid size: MaxReserved(2097151): a cap of 2097151 bytes (2.00 MiB) is below one page of 2.00 MiB, "+
		"the least the pool reserves at once, so no allocation could ever fit; give at least 2097152 bytes, or leave the cap out for none")
	_, err = gpu.OpenHost(gpu.HostMemory(1<<30), gpu.MaxReservedFraction(1e-4))
	require.ErrorIs(t, err, gpu.ErrInvalidSize)
	assert.ErrorContains(t, err, "MaxReservedFraction(0.0001): a cap of 107374 bytes (104.86 KiB) is below one page of 2.00 MiB")

	dev := openHost(t, gpu.MaxReserved(2<<20))
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(1 << 20)
		return err
	}), "one page holds an allocation that fits in it")
	err = dev.SetMaxReserved(1000)
	require.ErrorIs(t, err, gpu.ErrInvalidSize)
	assert.EqualError(t, err, "gpu: invalid size: a cap of 1000 bytes is below one page of 2.00 MiB, "+
		"the least the pool reserves at once, so no allocation could ever fit; give at least 2097152 bytes, or 0 to remove the cap")
	assert.Equal(t, int64(2<<20), dev.MaxReserved(), "a refused cap changes nothing")
	err = dev.SetMaxReservedFraction(1e-6)
	require.ErrorIs(t, err, gpu.ErrInvalidSize)
	assert.ErrorContains(t, err, "SetMaxReservedFraction(1e-06): a cap of")
	assert.Equal(t, int64(2<<20), dev.MaxReserved())
}

// A cap that is not a whole number of pages is shown exactly, with the
// page it holds whole ones of: 3 MiB and a byte hold one page of 2 MiB, so
// 2.5 MiB is beyond it, and raising the cap is what helps.
func TestAnOOMErrorShowsTheCapExactlyAndItsPage(t *testing.T) {
	dev := openHost(t, gpu.MaxReserved(3<<20+1))
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(5 << 19)
		return err
	}, gpu.Name("batch"))
	require.ErrorIs(t, err, gpu.ErrOutOfMemory)
	assert.Contains(t, err.Error(), `the pool's cap of 3145729 bytes (3.00 MiB), which holds whole pages of 2.00 MiB, refused 2.50 MiB in scope "batch"`)
	assert.Contains(t, err.Error(), "to fit, raise the cap above the request")
}
