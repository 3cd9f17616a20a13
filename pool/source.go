package pool

// Source is where a Pool gets raw memory. A device driver implements it; so
// does the simulated source of package pool/sim. Methods may be called from
// many goroutines, never while the pool holds a lock.
//
// An error that means "no room on the device" should have a method
// OutOfMemory() bool in its chain (see [IsSourceOutOfMemory]): the pool then
// releases its cache and retries. Other errors are returned as they are.
type Source interface {
	// Alloc returns size bytes of device memory.
	Alloc(size int64) (uintptr, error)
	// Free returns memory obtained from Alloc.
	Free(ptr uintptr, size int64) error
	// MemInfo reports the device's free and total bytes.
	MemInfo() (free, total int64, err error)
}

// EventSource is the optional capability of a Source for cross-stream reuse.
// Streams and events are opaque handles; stream 0 is the default stream.
type EventSource interface {
	// RecordEvent records an event on stream that completes when the work
	// queued on the stream so far has completed.
	RecordEvent(stream uintptr) (event uintptr, err error)
	// EventDone reports, without blocking, whether event has completed.
	EventDone(event uintptr) (bool, error)
	// WaitEvent blocks until event has completed. The pool calls it only
	// when it is out of memory, never on the allocation hot path.
	WaitEvent(event uintptr) error
	// DestroyEvent releases an event.
	DestroyEvent(event uintptr) error
}

// PageMapper is the optional capability of a Source to reserve address space
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
