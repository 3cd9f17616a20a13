// Package demo holds what the examples share: the device they run on and
// the memory report they print, in the manner of the GPUMemoryManager
// context manager PyTorch users write (memory before, inside, after).
package demo

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
)

// Main is an example's main: it runs run with standard output and, if
// run fails, says why on standard error, prefixed with the example's name,
// and exits with status 1.
func Main(name string, run func(w io.Writer) error) {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Open opens GPU 0 in a build with CUDA support on a machine that has one,
// its pool capped at capacity bytes, and otherwise the host-memory device
// of capacity bytes, saying so on w.
func Open(w io.Writer, capacity int64) (*gpu.Device, error) {
	dev, err := gpu.Open(0, gpu.PoolOptions(pool.MaxReserved(capacity)))
	if err == nil {
		fmt.Fprintf(w, "device: %s\n", dev)
		return dev, nil
	}
	if !errors.Is(err, gpu.ErrNoDevice) {
		return nil, err
	}
	dev, herr := gpu.OpenHost(gpu.HostMemory(capacity))
	if herr != nil {
		return nil, herr
	}
	why := "this build has no CUDA support; build with -tags cuda to run on GPU 0"
	if gpu.CUDA {
		why = err.Error()
	}
	fmt.Fprintf(w, "device: %s (no GPU: %s)\n", dev, why)
	return dev, nil
}

// OnDevice opens the device, as Open does, of capacity bytes, runs run on
// it and closes it: the start and end every example shares. It returns
// run's error joined with Close's.
func OnDevice(w io.Writer, capacity int64, run func(w io.Writer, dev *gpu.Device) error) error {
	dev, err := Open(w, capacity)
	return runAndClose(w, dev, err, run)
}

// OnHost is OnDevice on the host-memory device of capacity bytes, GPU or
// not: for an example that addresses the device's memory from Go
// (Slice.UseHost).
func OnHost(w io.Writer, capacity int64, run func(w io.Writer, dev *gpu.Device) error) error {
	dev, err := gpu.OpenHost(gpu.HostMemory(capacity))
	return runAndClose(w, dev, err, run)
}

// runAndClose runs run on dev, which opening it returned with err, and
// closes it, also where run panics.
func runAndClose(w io.Writer, dev *gpu.Device, err error, run func(w io.Writer, dev *gpu.Device) error) (runErr error) {
	if err != nil {
		return err
	}
	defer func() { runErr = errors.Join(runErr, dev.Close()) }()
	return run(w, dev)
}

// ToHost copies the elements of x into a new slice of the program's memory.
func ToHost[T gpu.Elem](x gpu.Slice[T]) ([]T, error) {
	v := make([]T, x.Len())
	if err := x.CopyToHost(v); err != nil {
		return nil, err
	}
	return v, nil
}

// LabelWidth is the width of Report's labels, colon included: the
// columns line up for labels up to this long.
const LabelWidth = 34

// Report prints the device's memory on one line, labelled when.
func Report(w io.Writer, when string, dev *gpu.Device) {
	st := dev.Stats()
	fmt.Fprintf(w, "%-*s allocated %-11s peak %-11s reserved %s\n", LabelWidth, when+":",
		gpu.Bytes(st.Allocated), gpu.Bytes(st.PeakAllocated), gpu.Bytes(st.Reserved))
}
