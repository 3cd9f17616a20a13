//go:build cuda

package main

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/cuda"
)

// saxpyPTX is our kernel, loaded by the driver at run time.
//
//go:embed saxpy.ptx
var saxpyPTX string

func openDevice(w io.Writer) (*gpu.Device, error) {
	dev, err := gpu.Open(0)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "device: %s\n", dev)
	return dev, nil
}

// saxpy loads the PTX and launches it on the buffers, which stay live until
// the kernel has finished.
func saxpy(dev *gpu.Device, y, x gpu.Slice[float32], a float32, n int) error {
	drv, ok := dev.Driver().(*cuda.Driver)
	if !ok {
		return errors.New("saxpy needs a CUDA device")
	}
	return y.Use(func(py uintptr) error {
		return x.Use(func(px uintptr) error {
			return drv.Do(func() error {
				mod, err := cu.LoadData(saxpyPTX)
				if err != nil {
					return fmt.Errorf("loading the PTX: %w", err)
				}
				defer mod.Unload()
				fn, err := mod.Function("saxpy")
				if err != nil {
					return err
				}
				// cu copies 8 bytes from each argument: give every one 8.
				args := []uint64{uint64(py), uint64(px), uint64(math.Float32bits(a)), uint64(n)}
				params := make([]unsafe.Pointer, len(args))
				for i := range args {
					params[i] = unsafe.Pointer(&args[i])
				}
				const block = 256
				if err := fn.Launch((n+block-1)/block, 1, 1, block, 1, 1, 0, cu.Stream{}, params); err != nil {
					return fmt.Errorf("launching saxpy: %w", err)
				}
				return cu.Synchronize()
			})
		})
	})
}
