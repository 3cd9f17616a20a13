//go:build cuda

package cuda

import "gorgonia.org/cu"

// The stream-ordered allocator on the default stream, for the benchmark
// against CUDA's own pool.
var KeepAsyncPool = keepAsyncPool

func AllocAsync(n int64) (uintptr, error) { return allocAsync(n, cu.Stream{}) }

func FreeAsync(p uintptr) error { return freeAsync(p, cu.Stream{}) }

// Do runs fn with the device's context current, for benchmarks that call
// CUDA directly.
func (d *Driver) Do(fn func() error) error { return d.do(fn) }
