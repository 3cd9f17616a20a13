// Command kernel runs a small kernel of our own, saxpy (y = a*x + y), on
// buffers owned by a scope, and checks the result against the same
// computation in Go.
//
//	go run -tags cuda ./examples/kernel   # on a GPU: the PTX in saxpy.ptx
//	go run ./examples/kernel              # without CUDA: on the host device
package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/gpuscope/gpuscope/gpu"
)

func main() {
	if err := run(os.Stdout, 1<<20); err != nil {
		fmt.Fprintln(os.Stderr, "kernel:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, n int) error {
	dev, err := openDevice(w)
	if err != nil {
		return err
	}
	defer dev.Close()
	const a = 2.5
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(i%1000) * 0.25
		y[i] = float32(i%7) - 3
	}
	want := make([]float32, n)
	for i := range want {
		want[i] = float32(math.FMA(a, float64(x[i]), float64(y[i])))
	}
	got := make([]float32, n)
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		dx, err := gpu.Alloc[float32](s, n)
		if err != nil {
			return err
		}
		dy, err := gpu.Alloc[float32](s, n)
		if err != nil {
			return err
		}
		if err := dx.CopyFromHost(x); err != nil {
			return err
		}
		if err := dy.CopyFromHost(y); err != nil {
			return err
		}
		if err := saxpy(s, dy, dx, a, n); err != nil {
			return err
		}
		return dy.CopyToHost(got)
	})
	if err != nil {
		return err
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("y[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	fmt.Fprintf(w, "saxpy on %d elements on %s: all %d results equal Go's\n", n, dev.Name(), n)
	fmt.Fprintf(w, "after the scope: %d bytes allocated\n", dev.Stats().Allocated)
	return nil
}
