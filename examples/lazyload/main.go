// Command lazyload streams a dataset eight times larger than the device
// through it, one chunk at a time: each chunk is staged in a child scope,
// reduced there, and only the small result is kept by the parent with
// Keep. The staging memory ends with each chunk's scope, so the peak stays
// at one chunk plus the results, far under the device's capacity.
//
//	go run ./examples/lazyload
package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

const (
	capacity   = 64 << 20 // the device, small on purpose
	chunkElems = 2 << 20  // float32s per chunk: 8 MiB
	chunks     = 64       // 512 MiB in all
)

func main() { demo.Main("lazyload", run) }

func run(w io.Writer) (err error) {
	// GPU 0 where the build and the machine have one, its pool capped at
	// capacity; else a host-memory device of that capacity.
	dev, err := gpu.OpenDefault(gpu.MaxReserved(capacity), gpu.HostMemory(capacity))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	demo.Opened(w, dev)
	return runOn(w, dev)
}

// runOn is the example on dev, which run opened.
func runOn(w io.Writer, dev *gpu.Device) error {
	fmt.Fprintf(w, "dataset: %d chunks of %s, %s in all, on a device of %s\n",
		chunks, gpu.Bytes(chunkElems*4), gpu.Bytes(chunks*chunkElems*4), gpu.Bytes(capacity))
	demo.Report(w, "before", dev)

	var want float64
	host := make([]float32, chunkElems)
	err := gpu.WithScope(context.Background(), dev, func(parent *gpu.Scope) error {
		results := make([]gpu.Slice[float64], chunks)
		for c := range chunks {
			load(host, c) // from disk or the network, in a real program
			for _, v := range host {
				want += float64(v)
			}
			err := gpu.WithScope(parent.Context(), dev, func(stage *gpu.Scope) error {
				x, err := gpu.Alloc[float32](stage, chunkElems)
				if err != nil {
					return err
				}
				if err := x.CopyFromHost(host); err != nil {
					return err
				}
				if results[c], err = reduce(stage, x); err != nil {
					return err
				}
				return stage.Keep(results[c].Buffer) // the result outlives the chunk
			}, gpu.Name(fmt.Sprintf("chunk %d", c)))
			if err != nil {
				return err
			}
		}
		demo.Report(w, "all chunks done", dev)
		var got float64
		one := make([]float64, 1)
		for _, r := range results {
			if err := r.CopyToHost(one); err != nil {
				return err
			}
			got += one[0]
		}
		fmt.Fprintf(w, "sum of %d values: %.0f (computed on the host: %.0f, equal: %v)\n", chunks*chunkElems, got, want, got == want)
		fmt.Fprintf(w, "results kept by the parent: %d buffers, %s\n", parent.Stats().Allocations, gpu.Bytes(parent.Stats().Live))
		return nil
	}, gpu.Name("dataset"))
	if err != nil {
		return err
	}
	demo.Report(w, "after", dev)
	st := dev.Stats()
	fmt.Fprintf(w, "peak %s of a %s device for %s of data: under capacity %v\n",
		gpu.Bytes(st.PeakAllocated), gpu.Bytes(capacity), gpu.Bytes(chunks*chunkElems*4), st.PeakAllocated < capacity)
	return nil
}

// load fills chunk c of the dataset: values that make every chunk's sum
// different and exact in float64.
func load(dst []float32, c int) {
	for i := range dst {
		dst[i] = float32((i + c) % 1000)
	}
}

// reduce sums x into a one-element slice allocated in s. The device has no
// kernels of its own here (see examples/kernel for one), so the sum is
// taken on the host after a copy back.
func reduce(s *gpu.Scope, x gpu.Slice[float32]) (gpu.Slice[float64], error) {
	sum := 0.0
	buf := make([]float32, x.Len())
	if err := x.CopyToHost(buf); err != nil {
		return gpu.Slice[float64]{}, err
	}
	for _, v := range buf {
		sum += float64(v)
	}
	r, err := gpu.Alloc[float64](s, 1)
	if err != nil {
		return gpu.Slice[float64]{}, err
	}
	return r, r.CopyFromHost([]float64{sum})
}
