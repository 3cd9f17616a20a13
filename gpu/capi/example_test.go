package capi_test

import (
	"context"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/capi"
)

// A scope handed to a C library that takes an allocator as a context and
// two functions: what the library allocates belongs to the scope, and ends
// with it at the latest.
func ExampleFor() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		a, err := capi.For(s) // what the library allocates is s's; once s ends, calls through a fail
		if err != nil {
			return err
		}
		// void *alloc(void *ctx, size_t size, cudaStream_t stream);
		// void free(void *ctx, void *ptr, size_t size, cudaStream_t stream);
		// Through cgo, in the file that declares the library's functions:
		// C.lib_set_allocator(a.Ctx, (*[0]byte)(a.Alloc), (*[0]byte)(a.Free))
		fmt.Println(a.Ctx != nil, a.Alloc != nil, a.Free != nil)
		return nil
	}, gpu.Name("onnx"))
	fmt.Println(err)
	// Output:
	// true true true
	// <nil>
}
