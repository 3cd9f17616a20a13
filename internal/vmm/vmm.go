// Package vmm declares the page-mapping capability (CUDA's virtual memory
// management) once, for the pool that uses it and the drivers that provide
// it: pool.PageMapper and driver.PageMapper are aliases of [PageMapper], so
// neither package imports the other and the two cannot drift apart.
package vmm

// PageMapper is the optional capability of a device to reserve address space
// and map physical memory into it (CUDA's virtual memory management). With
// it, a pool grows its arenas in place and moves memory to where it is needed
// instead of allocating more.
//
// Physical memory comes in handles of any multiple of Granularity bytes. A
// handle is mapped whole, at one address at a time, and unmapped whole. Each
// method is one driver call (cuMemCreate, cuMemMap, ...), so that a caller
// can count and time them; the pool makes as few as it can.
type PageMapper interface {
	// Granularity is the size every handle, mapping and reservation is a
	// multiple of, a power of two (2 MiB on an H200).
	Granularity() int64
	// ReserveAddress reserves size bytes of address space, mapped to nothing.
	ReserveAddress(size int64) (uintptr, error)
	// ReleaseAddress releases a reservation. Nothing is mapped in it any more.
	ReleaseAddress(ptr uintptr, size int64) error
	// Create creates a handle of size bytes of physical memory.
	Create(size int64) (handle uint64, err error)
	// Release frees a handle that is mapped nowhere.
	Release(handle uint64) error
	// Map maps the whole of handle, size bytes, at ptr (aligned to the
	// granularity, inside a reservation). The memory is not accessible until
	// SetAccess covers it.
	Map(ptr uintptr, size int64, handle uint64) error
	// SetAccess makes [ptr, ptr+size), every byte of it mapped, readable and
	// writable by the device.
	SetAccess(ptr uintptr, size int64) error
	// Unmap unmaps the mapping of size bytes that starts at ptr. The handle
	// stays alive.
	Unmap(ptr uintptr, size int64) error
}
