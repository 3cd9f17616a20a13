//go:build cuda

package cuda

// The stream-ordered allocator, for the benchmark against CUDA's own pool.
var (
	AllocAsync    = allocAsync
	FreeAsync     = freeAsync
	KeepAsyncPool = keepAsyncPool
)

// Do runs fn with the device's context current, for benchmarks that call
// CUDA directly.
func (d *Driver) Do(fn func() error) error { return d.do(fn) }
