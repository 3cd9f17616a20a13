// Command model is the shape of an inference or training loop: the weights
// live in a long-lived scope, each batch's activations in a scope of their
// own. It prints the device's memory before, during and after, and shows
// that the allocated bytes plateau at weights + one batch: memory that stays
// after a batch is the cache (reserved), not a leak (allocated).
//
//	go run ./examples/model
package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

const (
	layers     = 4
	layerBytes = 4 << 20 // each layer's weights
	batches    = 50
	batchRows  = 256 // activations per layer: batchRows x 1024 float32
)

func main() { demo.Main("model", run) }

func run(w io.Writer) (err error) {
	// GPU 0 where the build and the machine have one, its pool capped at
	// 1 GiB; else a host-memory device of 1 GiB.
	dev, err := gpu.OpenDefault(gpu.MaxReserved(1<<30), gpu.HostMemory(1<<30))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	demo.Opened(w, dev)
	return runOn(w, dev)
}

// runOn is the example on dev, which run opened.
func runOn(w io.Writer, dev *gpu.Device) error {
	demo.Report(w, "before", dev)

	weights, err := dev.NewScope(gpu.Name("weights"))
	if err != nil {
		return err
	}
	defer weights.Close()
	ws := make([]gpu.Slice[float32], layers)
	for i := range ws {
		if ws[i], err = gpu.Alloc[float32](weights, layerBytes/4); err != nil {
			return err
		}
		if err := ws[i].Memset(0); err != nil {
			return err
		}
	}
	demo.Report(w, "weights loaded", dev)

	var plateau int64
	steady := true
	for b := range batches {
		err := gpu.WithScope(weights.Context(), dev, func(batch *gpu.Scope) error {
			return forward(batch, ws)
		}, gpu.Name("batch"))
		if err != nil {
			return fmt.Errorf("batch %d: %w", b, err)
		}
		// Between batches only the weights are allocated.
		if got := dev.Stats().Allocated; b == 0 {
			plateau = got
		} else if got != plateau {
			steady = false
		}
		if b%10 == 9 {
			demo.Report(w, fmt.Sprintf("after batch %d", b+1), dev)
		}
	}
	fmt.Fprintf(w, "allocated between batches: %s in each of %d batches: plateau %v\n", gpu.Bytes(plateau), batches, steady)
	fmt.Fprintf(w, "weights %s + one batch of activations %s = peak %s\n",
		gpu.Bytes(layers*layerBytes), gpu.Bytes(activationBytes()), gpu.Bytes(dev.Stats().PeakAllocated))

	if err := weights.Close(); err != nil {
		return err
	}
	demo.Report(w, "weights closed", dev)
	before := dev.Stats().Reserved
	if err := dev.EmptyCache(); err != nil {
		return err
	}
	demo.Report(w, "after EmptyCache", dev)
	fmt.Fprintf(w, "EmptyCache gave back %s\n", gpu.Bytes(before-dev.Stats().Reserved))
	return nil
}

// activationBytes is what one batch allocates: an input and an output
// activation per layer, the output of one layer being the next one's input.
func activationBytes() int64 { return (layers + 1) * batchRows * 1024 * 4 }

// forward allocates each layer's output in the batch's scope and "computes"
// it with a copy (a kernel would launch here on a GPU; copies keep the
// example runnable on the host device too).
func forward(s *gpu.Scope, ws []gpu.Slice[float32]) error {
	in, err := gpu.Alloc[float32](s, batchRows*1024)
	if err != nil {
		return err
	}
	if err := in.Memset(1); err != nil {
		return err
	}
	for range ws {
		out, err := gpu.Alloc[float32](s, batchRows*1024)
		if err != nil {
			return err
		}
		if err := out.CopyFrom(in.Buffer); err != nil {
			return err
		}
		in = out
	}
	return nil
}
