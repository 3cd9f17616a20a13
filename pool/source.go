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
// and map physical pages into it (CUDA's cuMemAddressReserve, cuMemCreate,
// cuMemMap and cuMemSetAccess). With it, a pool grows its segments in place
// and moves pages to where they are needed instead of allocating new memory.
type PageMapper interface {
	// PageSize is the size of one physical page, a power of two.
	PageSize() int64
	// ReserveAddress reserves size bytes of address space, mapped to nothing.
	ReserveAddress(size int64) (uintptr, error)
	// ReleaseAddress releases a reservation. Nothing is mapped in it any more.
	ReleaseAddress(ptr uintptr, size int64) error
	// CreatePage creates one physical page of PageSize bytes.
	CreatePage() (page uint64, err error)
	// ReleasePage frees a page that is mapped nowhere.
	ReleasePage(page uint64) error
	// MapPages maps pages, in order, at ptr (page aligned) and makes the
	// range readable and writable.
	MapPages(ptr uintptr, pages []uint64) error
	// UnmapPages unmaps size bytes (whole pages) at ptr. The pages stay alive.
	UnmapPages(ptr uintptr, size int64) error
}
