package gpu_test

import (
	"context"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
)

// The README's first example, word for word between the markers
// (docs/readme_test.go checks that they agree).
func Example_readme() {
	run := func(ctx context.Context, values []float32) error {
		// README begin
		dev, err := gpu.OpenDefault() // GPU 0 where the build (-tags cuda) and the machine have one, else host memory
		if err != nil {
			return err
		}
		defer dev.Close()

		err = gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
			x, err := gpu.Alloc[float32](s, 1000*1000)
			if err != nil {
				return err
			}
			return x.CopyFromHost(values)
		}) // everything the scope allocated is freed here, when the function returns or panics
		// README end
		fmt.Println("allocated after the scope:", gpu.Bytes(dev.Stats().Allocated), "peak", gpu.Bytes(dev.Stats().PeakAllocated))
		return err
	}
	fmt.Println("error:", run(context.Background(), make([]float32, 1000)))
	// Output:
	// allocated after the scope: 0 B peak 3.81 MiB
	// error: <nil>
}
