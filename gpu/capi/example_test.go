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
		a, err := capi.For(s)
		if err != nil {
			return err
		}
		// Through cgo, for instance:
		//	C.lib_set_allocator(a.Ctx, (C.alloc_fn)(a.Alloc), (C.free_fn)(a.Free))
		fmt.Println(a.Ctx != nil, a.Alloc != nil, a.Free != nil)
		return nil
	}, gpu.Name("onnx"))
	fmt.Println(err)
	// Output:
	// true true true
	// <nil>
}
