// Command quickstart is gpuscope's first scenario: a 1000x1000 float32
// matrix of random values on the device inside a scope, with the device's
// memory shown before, inside and after the scope, and after EmptyCache.
//
//	go run ./examples/quickstart
//
// It uses GPU 0 when built with -tags cuda on a machine with a GPU, and
// otherwise says that it runs on the host-memory device.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

func main() { demo.Main("quickstart", run) }

func run(w io.Writer) (err error) {
	// GPU 0 where the build and the machine have one; else 2 GiB of host memory.
	dev, err := gpu.OpenDefault(gpu.HostMemory(2 << 30))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	demo.Opened(w, dev)
	show(w, "before the scope", dev)

	const n = 1000 * 1000
	values := make([]float32, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range values {
		values[i] = r.Float32()
	}
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := gpu.Alloc[float32](s, n)
		if err != nil {
			return err
		}
		if err := x.CopyFromHost(values); err != nil {
			return err
		}
		back := make([]float32, n)
		if err := x.CopyToHost(back); err != nil {
			return err
		}
		for i := range back {
			if back[i] != values[i] {
				return fmt.Errorf("element %d came back as %v, want %v", i, back[i], values[i])
			}
		}
		fmt.Fprintf(w, "copied %d float32 values to the device and back: all equal\n", n)
		show(w, "inside the scope", dev)
		return nil
	})
	if err != nil {
		return err
	}
	show(w, "after the scope (allocated is zero; reserved stays cached)", dev)
	if err := dev.EmptyCache(); err != nil {
		return err
	}
	show(w, "after EmptyCache", dev)
	return nil
}

func show(w io.Writer, when string, dev *gpu.Device) {
	st := dev.Stats()
	fmt.Fprintf(w, "%-60s allocated %-11s reserved %s\n", when+":",
		gpu.Bytes(st.Allocated), gpu.Bytes(st.Reserved))
}
