//go:build cuda

package cuda

import "github.com/gpuscope/gpuscope/internal/prefixed"

// AllocAsync allocates size bytes from CUDA's own stream-ordered pool
// (cuMemAllocAsync), ordered on stream (0: the default stream), bypassing
// gpuscope's pool: it is the baseline that benchmarks compare scopes
// with. Free it with FreeAsync.
func (d *Driver) AllocAsync(size int64, stream uintptr) (ptr uintptr, err error) {
	if size <= 0 {
		return 0, prefixed.Errorf("cuda", "AllocAsync(%d): size must be positive", size)
	}
	st, err := d.stream(stream)
	if err != nil {
		return 0, err
	}
	err = d.do(func() (err error) {
		ptr, err = allocAsync(size, st)
		return err
	})
	return ptr, err
}

// FreeAsync frees memory from AllocAsync once the work queued on stream
// before it has run (cuMemFreeAsync).
func (d *Driver) FreeAsync(ptr, stream uintptr) error {
	st, err := d.stream(stream)
	if err != nil {
		return err
	}
	return d.do(func() error { return freeAsync(ptr, st) })
}

// KeepAsyncPool makes CUDA's stream-ordered pool of the device keep the
// memory FreeAsync returns (its release threshold at the maximum), as a
// caching allocator does, so that a benchmark compares caching with
// caching.
func (d *Driver) KeepAsyncPool() error {
	if err := d.open(); err != nil {
		return err
	}
	return d.do(func() error { return keepAsyncPool(d.ordinal) })
}
