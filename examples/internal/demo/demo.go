// Package demo holds what the examples share: the line that says which
// device they run on and the memory report they print, in the manner of
// the GPUMemoryManager context manager PyTorch users write (memory
// before, inside, after). Each example opens its device itself, with
// gpu.OpenDefault, as a program of a user's does.
package demo

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpuscope/gpuscope/gpu"
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

// Opened says on w which device an example runs on, as gpu.OpenDefault
// chose it: "device: cuda:0 (NVIDIA H200)", or the host device and why
// there is no GPU.
func Opened(w io.Writer, dev *gpu.Device) {
	why := ""
	switch {
	case !strings.HasPrefix(dev.Name(), "host:"):
	case !gpu.CUDA:
		why = " (no GPU: this build has no CUDA support; build with -tags cuda to run on GPU 0)"
	default:
		why = " (no GPU: the CUDA driver has no device 0)"
	}
	fmt.Fprintf(w, "device: %s%s\n", dev, why)
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
