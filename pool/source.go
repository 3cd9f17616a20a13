package pool

import "github.com/gpuscope/gpuscope/internal/vmm"

// Source is where a Pool gets raw memory. A device driver implements it; so
// does the simulated source of package internal/sim. Methods may be called from
// many goroutines, never while the pool holds a lock.
//
// An error that means "no room on the device" should have a method
// OutOfMemory() bool returning true in its chain (errors.As finds it), so
// that drivers need not import pool: the pool then releases its cache and
// retries. Other errors are returned as they are.
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
// An error that means "this stream no longer exists" (destroyed without
// [Pool.RetireStream]) should have a method StreamGone() bool returning
// true in its chain: the pool then takes the stream as retired, its work
// done, so that EmptyCache and Close still give its memory back. Destroy a
// stream only once its work has completed.
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
// and map physical memory into it (CUDA's virtual memory management); see
// [vmm.PageMapper] for what each method does. It is declared once, in an
// internal package the drivers share, so that a driver needs no pool.
type PageMapper = vmm.PageMapper
