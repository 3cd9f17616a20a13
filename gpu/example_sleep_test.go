// The host device maps pages on Linux only, and a Sleepable scope needs
// them (GPUs run Linux too).

//go:build linux

package gpu_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
)

// Weights that sleep while another workload has the device: Sleep gives
// their memory back and keeps what it held, Wake maps memory again at the
// same address, and in between their buffers refuse every use.
func ExampleSleepable() {
	ctx := context.Background()
	dev, err := gpu.OpenHost(gpu.HostMemory(8 << 20))
	if err != nil {
		panic(err)
	}
	defer dev.Close()

	weights, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
	if err != nil {
		panic(err)
	}
	defer weights.Close()
	w, err := gpu.Alloc[float32](weights, 1<<20) // 4 MiB
	if err != nil {
		panic(err)
	}
	if err := w.CopyFromHost([]float32{0.5, 0.25}); err != nil {
		panic(err)
	}
	at := w.Ptr()

	if err := weights.Sleep(ctx, gpu.KeepContents); err != nil {
		panic(err)
	}
	fmt.Println("asleep:", dev.Stats().Sleeping>>20, "MiB, reserved:", dev.Stats().Reserved>>20, "MiB")
	fmt.Println("use while asleep:", errors.Is(w.CopyFromHost([]float32{1}), gpu.ErrAsleep))

	// Another workload takes the whole device meanwhile, and ends.
	err = gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(8 << 20)
		return err
	})
	if err != nil {
		panic(err)
	}

	if err := weights.Wake(ctx); err != nil {
		panic(err)
	}
	got := make([]float32, 2)
	if err := w.CopyToHost(got); err != nil {
		panic(err)
	}
	fmt.Println("awake:", got, "at the same address:", w.Ptr() == at)
	// Output:
	// asleep: 4 MiB, reserved: 0 MiB
	// use while asleep: true
	// awake: [0.5 0.25] at the same address: true
}
