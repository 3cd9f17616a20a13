// Command kernel runs a small kernel of our own, saxpy (y = a*x + y), on
// buffers owned by a scope, and checks the result against the same
// computation in Go.
//
//	go run -tags cuda ./examples/kernel   # on a GPU: the PTX in saxpy.ptx
//	go run ./examples/kernel              # without CUDA: on the host device
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

func main() { demo.Main("kernel", func(w io.Writer) error { return run(w, 1<<20) }) }

// pinnedCopy returns page-locked memory owned by s holding v.
func pinnedCopy(s *gpu.Scope, v []float32) (gpu.HostSlice[float32], error) {
	h, err := gpu.AllocHost[float32](s, len(v))
	if err != nil {
		return h, err
	}
	return h, h.Use(func(p []float32) error { copy(p, v); return nil })
}

// saxpyAsync queues on st the copies of x and y to the device, a*x+y by the
// kernel, and the copy of the result back to the page-locked memory it
// returns, which holds the result once st is synchronized.
func saxpyAsync(s *gpu.Scope, st *gpu.Stream, a float32, x, y []float32) (gpu.HostSlice[float32], error) {
	var out gpu.HostSlice[float32]
	hx, err := pinnedCopy(s, x)
	if err != nil {
		return out, err
	}
	hy, err := pinnedCopy(s, y)
	if err != nil {
		return out, err
	}
	dx, err := gpu.Alloc[float32](s, len(x))
	if err != nil {
		return out, err
	}
	dy, err := gpu.Alloc[float32](s, len(y))
	if err != nil {
		return out, err
	}
	if err := dx.CopyFromHostAsync(hx, st); err != nil {
		return out, err
	}
	if err := dy.CopyFromHostAsync(hy, st); err != nil {
		return out, err
	}
	if err := saxpy(s, st, dy, dx, a, len(x)); err != nil {
		return out, err
	}
	if out, err = gpu.AllocHost[float32](s, len(y)); err != nil {
		return out, err
	}
	return out, dy.CopyToHostAsync(out, st)
}

func run(w io.Writer, n int) (err error) {
	dev, err := gpu.OpenDefault() // GPU 0 where the build and the machine have one, else host memory
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	demo.Opened(w, dev)
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
		// Two halves, each on a stream of its own: pinned host memory,
		// asynchronous copies in, the kernel, an asynchronous copy out.
		half := []int{0, n / 2, n}
		var streams [2]*gpu.Stream
		var outs [2]gpu.HostSlice[float32]
		for k := range 2 {
			lo, hi := half[k], half[k+1]
			st, err := s.NewStream()
			if err != nil {
				return err
			}
			if outs[k], err = saxpyAsync(s, st, a, x[lo:hi], y[lo:hi]); err != nil {
				return err
			}
			streams[k] = st
		}
		for k, st := range streams {
			if err := st.Synchronize(); err != nil {
				return err
			}
			if err := outs[k].Use(func(v []float32) error { copy(got[half[k]:], v); return nil }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("y[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	fmt.Fprintf(w, "saxpy on %d elements on %s, in two halves on two streams: all %d results equal Go's\n", n, dev.Name(), n)
	fmt.Fprintf(w, "after the scope: %d bytes allocated\n", dev.Stats().Allocated)
	return nil
}
