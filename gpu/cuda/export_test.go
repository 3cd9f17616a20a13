//go:build cuda

package cuda

// The stream-ordered allocator, for the benchmark against CUDA's own pool.
var (
	AllocAsync    = allocAsync
	FreeAsync     = freeAsync
	KeepAsyncPool = keepAsyncPool
)
