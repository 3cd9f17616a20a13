package gpu_test

import (
	"context"
	"errors"
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
	// device host:0 (host memory, 1.00 GiB)
	//   allocated     19.00 MiB   peak    19.00 MiB
	//   reserved      20.00 MiB   peak    20.00 MiB
	//   cached         1.00 MiB   (reserved, not in use, 1 free block; EmptyCache returns it)
	//   buffers               2   peak            2
	//   in all     2 allocations (19.00 MiB), 0 frees (0 B), 1 served from the cache, 0 out of memory
	// 2 scopes open (bytes taken with their children, peak, own buffers), largest first:
	//   weights                         19.00 MiB   peak    19.00 MiB   1 buffer (16.00 MiB)
	//     batch                          3.00 MiB   peak     3.00 MiB   1 buffer (3.00 MiB)
	// allocated 16.00 MiB (peak 19.00 MiB), reserved 20.00 MiB (peak 20.00 MiB), cached 4.00 MiB; 1 buffer live, 1 scope open
}

// A program that runs with or without a GPU opens the default device: GPU
// 0 where the build has CUDA support and the machine a GPU, host memory
// elsewhere (HostMemory sizes it there). The same scopes work on either.
func ExampleOpenDefault() {
	dev, err := gpu.OpenDefault(gpu.HostMemory(256 << 20))
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

// WithScope frees what the scope allocated when the function returns: the
// device's allocated bytes go back to what they were.
func ExampleWithScope() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := gpu.Alloc[float32](s, 1<<20) // 4 MiB
		if err != nil {
			return err
		}
		fmt.Println("inside:", gpu.Bytes(dev.Stats().Allocated), "allocated,", gpu.Bytes(x.Size()), "in x")
		return x.CopyFromHost([]float32{1, 2, 3})
	})
	fmt.Println("after:", gpu.Bytes(dev.Stats().Allocated), "allocated; error:", err)
	// Output:
	// inside: 4.00 MiB allocated, 4.00 MiB in x
	// after: 0 B allocated; error: <nil>
}

// Keep hands a buffer to the parent scope: it outlives the child, and the
// handle the caller holds stays valid.
func ExampleScope_Keep() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(parent *gpu.Scope) error {
		var result gpu.Slice[int32]
		err := gpu.WithScope(parent.Context(), dev, func(child *gpu.Scope) error {
			scratch, err := gpu.Alloc[int32](child, 1024)
			if err != nil {
				return err
			}
			if result, err = gpu.Alloc[int32](child, 3); err != nil {
				return err
			}
			if err := result.CopyFromHost([]int32{7, 8, 9}); err != nil {
				return err
			}
			_ = scratch // ends with the child
			return child.Keep(result.Buffer)
		})
		if err != nil {
			return err
		}
		got := make([]int32, 3)
		err = result.CopyToHost(got)
		fmt.Println("kept:", got, "parent owns", parent.Stats().Allocations, "buffer")
		return err
	})
	fmt.Println("error:", err)
	// Output:
	// kept: [7 8 9] parent owns 1 buffer
	// error: <nil>
}

// A scope from NewScope lives until Close: for what outlives one function,
// such as a model's weights.
func ExampleDevice_NewScope() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	weights, err := dev.NewScope(gpu.Name("weights"))
	if err != nil {
		panic(err)
	}
	w, err := weights.Alloc(8 << 20)
	if err != nil {
		panic(err)
	}
	fmt.Println(weights.Path(), "holds", gpu.Bytes(w.Size()))
	fmt.Println("close:", weights.Close())
	fmt.Println("use after close fails with ErrScopeClosed:", errors.Is(w.Memset(0), gpu.ErrScopeClosed))
	// Output:
	// weights holds 8.00 MiB
	// close: <nil>
	// use after close fails with ErrScopeClosed: true
}

// Reserve sets memory aside when the scope opens; the scope and its
// children draw from it before the pool.
func ExampleReserve() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		fmt.Println("reserved at open:", gpu.Bytes(s.Stats().Reserved), "taken from the device:", gpu.Bytes(dev.Stats().Allocated))
		if _, err := s.Alloc(1 << 20); err != nil {
			return err
		}
		fmt.Println("after a 1 MiB allocation:", gpu.Bytes(dev.Stats().Allocated), "taken from the device")
		return nil
	}, gpu.Reserve(16<<20))
	fmt.Println("error:", err)
	// Output:
	// reserved at open: 16.00 MiB taken from the device: 16.00 MiB
	// after a 1 MiB allocation: 16.00 MiB taken from the device
	// error: <nil>
}

// Limit caps the bytes a scope and its children hold; past it an
// allocation fails with an out-of-memory error, and nothing else changes.
func ExampleLimit() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		for i := 1; ; i++ {
			if _, err := s.Alloc(3 << 20); err != nil {
				fmt.Println("allocation", i, "out of memory:", errors.Is(err, gpu.ErrOutOfMemory))
				fmt.Println("the scope holds", gpu.Bytes(s.Stats().Live))
				return nil
			}
		}
	}, gpu.Limit(10<<20))
	fmt.Println("error:", err)
	// Output:
	// allocation 4 out of memory: true
	// the scope holds 9.00 MiB
	// error: <nil>
}

// Alloc gives a typed slice of device memory; copies check their lengths.
func ExampleAlloc() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := gpu.Alloc[float64](s, 4)
		if err != nil {
			return err
		}
		if err := x.CopyFromHost([]float64{0.5, 1.5, 2.5, 3.5}); err != nil {
			return err
		}
		back := make([]float64, x.Len())
		if err := x.CopyToHost(back); err != nil {
			return err
		}
		fmt.Println(back, gpu.Bytes(x.Size()))
		fmt.Println("too long:", x.CopyFromHost(make([]float64, 5)) != nil)
		return nil
	})
	fmt.Println("error:", err)
	_, err = gpu.Alloc[float64](nil, 4)
	fmt.Println("nil scope:", errors.Is(err, gpu.ErrScopeClosed))
	// Output:
	// [0.5 1.5 2.5 3.5] 32 B
	// too long: true
	// error: <nil>
	// nil scope: true
}

// Freed memory stays in the device's cache for the next scope; EmptyCache
// gives back what no buffer uses.
func ExampleDevice_EmptyCache() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(32 << 20)
		return err
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("after the scope:", gpu.Bytes(dev.Stats().Allocated), "allocated,", gpu.Bytes(dev.Stats().Reserved), "reserved")
	if err := dev.EmptyCache(); err != nil {
		panic(err)
	}
	fmt.Println("after EmptyCache:", gpu.Bytes(dev.Stats().Reserved), "reserved")
	// Output:
	// after the scope: 0 B allocated, 40.00 MiB reserved
	// after EmptyCache: 0 B reserved
}

// Stats are the device's counters, as PyTorch's memory_allocated and
// memory_reserved, with their peaks.
func ExampleDevice_Stats() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		a, err := s.Alloc(5 << 20)
		if err != nil {
			return err
		}
		if _, err := s.Alloc(5 << 20); err != nil {
			return err
		}
		return s.Free(a)
	})
	if err != nil {
		panic(err)
	}
	st := dev.Stats()
	fmt.Println("allocated", gpu.Bytes(st.Allocated), "peak", gpu.Bytes(st.PeakAllocated))
	fmt.Println(st.Allocs, "allocations,", st.Frees, "frees,", st.OpenScopes, "scopes open")
	// Output:
	// allocated 0 B peak 10.00 MiB
	// 2 allocations, 2 frees, 0 scopes open
}
