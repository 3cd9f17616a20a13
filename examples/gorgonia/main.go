// Command gorgonia multiplies two matrices with gorgonia.org/tensor on
// memory a gpuscope scope owns, on the host-memory device: the tensors'
// backing slices are the device buffers themselves, not copies.
//
//	cd examples/gorgonia && go run .
//
// A tensor built this way must not outlive the Slice.UseHost call that
// gave it its backing, nor the scope: once the scope ends, the memory goes
// back to the device's pool and serves the next buffer, and a tensor still
// holding it would read, or write, another buffer's data. Build the
// tensor inside UseHost, use it there, and copy out what must last.
//
// It is a module of its own, so that gpuscope's own dependencies stay
// small; the host device is the only one whose memory a Go library can
// address (on a GPU, UseHost fails with gpu.ErrNotSupported).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"gorgonia.org/tensor"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

func main() { demo.Main("gorgonia", run) }

// run opens a host-memory device of 64 MiB, GPU or not: gorgonia's
// tensors address the device's memory from Go (Slice.UseHost).
func run(w io.Writer) (err error) {
	dev, err := gpu.OpenHost(gpu.HostMemory(64 << 20))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	return runOn(w, dev)
}

// runOn is the example on dev, the host-memory device run opened.
func runOn(w io.Writer, dev *gpu.Device) error {
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		a, err := filled(s, []float64{1, 2, 3, 4, 5, 6}) // 2x3
		if err != nil {
			return err
		}
		b, err := filled(s, []float64{7, 8, 9, 10, 11, 12}) // 3x2
		if err != nil {
			return err
		}
		c, err := gpu.Alloc[float64](s, 4) // 2x2, the product
		if err != nil {
			return err
		}
		err = onDevice(a, b, c, func(ta, tb, tc *tensor.Dense) error {
			_, err := ta.MatMul(tb, tensor.WithReuse(tc)) // writes into c's memory
			return err
		})
		if err != nil {
			return err
		}
		got, err := demo.ToHost(c)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "a (2x3) x b (3x2), computed by gorgonia.org/tensor in scope-owned memory: %v\n", got)
		fmt.Fprintf(w, "inside the scope: %s allocated\n", gpu.Bytes(dev.Stats().Allocated))
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "after the scope: %s allocated\n", gpu.Bytes(dev.Stats().Allocated))
	return nil
}

// filled allocates a slice in s holding v.
func filled(s *gpu.Scope, v []float64) (gpu.Slice[float64], error) {
	x, err := gpu.Alloc[float64](s, len(v))
	if err != nil {
		return x, err
	}
	return x, x.CopyFromHost(v)
}

// onDevice is the adapter: it gives fn tensors whose backing is the
// device memory of a (2x3), b (3x2) and c (2x2), valid only while fn runs.
func onDevice(a, b, c gpu.Slice[float64], fn func(ta, tb, tc *tensor.Dense) error) error {
	return a.UseHost(func(av []float64) error {
		return b.UseHost(func(bv []float64) error {
			return c.UseHost(func(cv []float64) error {
				ta := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(av))
				tb := tensor.New(tensor.WithShape(3, 2), tensor.WithBacking(bv))
				tc := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking(cv))
				return fn(ta, tb, tc)
			})
		})
	})
}
