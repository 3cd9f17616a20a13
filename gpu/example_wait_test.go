package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gpuscope/gpuscope/gpu"
)

// Requests that queue for memory instead of failing: eight requests of
// 3 MiB each on a device that holds two of them at a time all complete,
// and one that could never fit fails at once.
func ExampleWaitForMemory() {
	dev, err := gpu.OpenHost(gpu.HostMemory(8 << 20))
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	ctx := context.Background()

	handle := func(ctx context.Context, n int) error {
		return gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
			x, err := gpu.Alloc[float32](s, n) // waits while the device is full
			if err != nil {
				return err // the context ended first, or n can never fit
			}
			return x.CopyFromHost(make([]float32, n))
		}, gpu.WaitForMemory())
	}

	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = handle(ctx, 3<<20/4) })
	}
	wg.Wait()
	fmt.Println("requests served:", len(errs), "errors:", errors.Join(errs...))

	err = handle(ctx, 16<<20/4) // twice the device: no wait would help
	fmt.Println("too large:", errors.Is(err, gpu.ErrOutOfMemory))
	// Output:
	// requests served: 8 errors: <nil>
	// too large: true
}
