package gpu_test

import (
	"context"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
)

// A long-lived scope holds the weights; a scope per batch holds the
// activations. Summary shows both as a tree, with the bytes each takes.
func ExampleDevice_Summary() {
	dev, err := gpu.OpenHost(gpu.HostMemory(1 << 30))
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	weights, err := dev.NewScope(gpu.Name("weights"))
	if err != nil {
		panic(err)
	}
	defer weights.Close()
	if _, err := gpu.Alloc[float32](weights, 4<<20); err != nil { // 16 MiB
		panic(err)
	}
	err = gpu.WithScope(weights.Context(), dev, func(batch *gpu.Scope) error {
		if _, err := batch.Alloc(3 << 20); err != nil {
			return err
		}
		fmt.Print(dev.Summary())
		return nil
	}, gpu.Name("batch"))
	if err != nil {
		panic(err)
	}
	fmt.Println(dev.Stats())
	// Output:
	// device host (host memory, 1.00 GiB)
	//   allocated     19.00 MiB   peak    19.00 MiB
	//   reserved      20.00 MiB   peak    20.00 MiB
	//   cached         1.00 MiB   (reserved, not in use, 1 free blocks; EmptyCache returns it)
	//   buffers               2   peak            2
	//   in all     2 allocations (19.00 MiB), 0 frees (0 B), 0 served from the cache, 0 out of memory
	// 2 scopes open (bytes taken with their children, peak, own buffers), largest first:
	//   weights                         19.00 MiB   peak    19.00 MiB   1 buffers (16.00 MiB)
	//     batch                          3.00 MiB   peak     3.00 MiB   1 buffers (3.00 MiB)
	// allocated 16.00 MiB (peak 19.00 MiB), reserved 20.00 MiB (peak 20.00 MiB), cached 4.00 MiB; 1 buffers live, 1 scopes open
}

// A program that runs with or without a GPU picks its device by what the
// build supports: GPU 0 where it has CUDA, host memory elsewhere. The same
// scopes then work on either.
func Example_chooseDevice() {
	open := func() (*gpu.Device, error) {
		if gpu.CUDA {
			return gpu.Open(0)
		}
		return gpu.OpenHost()
	}
	dev, err := open()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := gpu.Alloc[float32](s, 1024)
		if err != nil {
			return err
		}
		fmt.Println("allocated", x.Len(), "floats")
		return nil
	})
	fmt.Println("error:", err)
	// Output:
	// allocated 1024 floats
	// error: <nil>
}
