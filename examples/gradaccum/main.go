// Command gradaccum accumulates gradients over micro-batches: the step's
// scope holds one accumulation buffer, and each micro-batch's activations
// live in a child scope that ends before the next begins. Splitting the
// same batch into more micro-batches lowers the peak memory and gives the
// same gradient.
//
//	go run ./examples/gradaccum
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

const (
	batchRows = 512
	features  = 1024 // float32 per row: 4 KiB
	layers    = 3    // activation buffers per micro-batch
)

func main() { demo.Main("gradaccum", run) }

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
	var grads [][]float32
	for _, micro := range []int{1, 8} {
		dev.ResetPeaks()
		g, err := step(dev, micro, w)
		if err != nil {
			return err
		}
		grads = append(grads, g)
		fmt.Fprintf(w, "%d micro-batch(es) of %d rows: peak %s\n", micro, batchRows/micro, gpu.Bytes(dev.Stats().PeakAllocated))
	}
	fmt.Fprintf(w, "the same gradient both ways: %v\n", slices.Equal(grads[0], grads[1]))
	demo.Report(w, "after", dev)
	return nil
}

// step runs one training step over the batch in micro micro-batches and
// returns the accumulated gradient.
func step(dev *gpu.Device, micro int, w io.Writer) ([]float32, error) {
	grad := make([]float32, features)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		accum, err := gpu.Alloc[float32](s, features)
		if err != nil {
			return err
		}
		if err := accum.Memset(0); err != nil {
			return err
		}
		rows := batchRows / micro
		for m := range micro {
			err := gpu.WithScope(s.Context(), dev, func(mb *gpu.Scope) error {
				return microBatch(mb, accum, m*rows, rows)
			}, gpu.Name("micro-batch"))
			if err != nil {
				return err
			}
		}
		demo.Report(w, fmt.Sprintf("inside, %d micro-batch(es) done", micro), dev)
		return accum.CopyToHost(grad)
	}, gpu.Name("step"))
	return grad, err
}

// microBatch allocates the activations of rows rows starting at first,
// "runs" the layers with copies, and adds the column sums of the last
// activation to accum. Kernels would do this on a GPU; copies and the
// host keep the example runnable everywhere.
func microBatch(s *gpu.Scope, accum gpu.Slice[float32], first, rows int) error {
	input := make([]float32, rows*features)
	for r := range rows {
		for f := range features {
			input[r*features+f] = float32((first + r + f) % 7)
		}
	}
	act, err := gpu.Alloc[float32](s, rows*features)
	if err != nil {
		return err
	}
	if err := act.CopyFromHost(input); err != nil {
		return err
	}
	for range layers - 1 {
		next, err := gpu.Alloc[float32](s, rows*features)
		if err != nil {
			return err
		}
		if err := next.CopyFrom(act.Buffer); err != nil {
			return err
		}
		act = next
	}
	out, err := demo.ToHost(act)
	if err != nil {
		return err
	}
	sum, err := demo.ToHost(accum)
	if err != nil {
		return err
	}
	for r := range rows {
		for f := range features {
			sum[f] += out[r*features+f]
		}
	}
	return accum.CopyFromHost(sum)
}
