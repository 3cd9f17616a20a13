//go:build !cuda

package main

import (
	"math"

	"github.com/gpuscope/gpuscope/gpu"
)

// saxpy computes on the host device, which runs no kernels: once st has
// run what was queued on it, the buffers are read, combined in Go and
// written back, standing in for the kernel.
func saxpy(_ *gpu.Scope, st *gpu.Stream, y, x gpu.Slice[float32], a float32, n int) error {
	if err := st.Synchronize(); err != nil {
		return err
	}
	hx, hy := make([]float32, n), make([]float32, n)
	if err := x.CopyToHost(hx); err != nil {
		return err
	}
	if err := y.CopyToHost(hy); err != nil {
		return err
	}
	for i := range hy {
		hy[i] = float32(math.FMA(float64(a), float64(hx[i]), float64(hy[i])))
	}
	return y.CopyFromHost(hy)
}
