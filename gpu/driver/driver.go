// Package driver is the small interface a gpuscope device driver implements:
// gpu's host-memory one (the default) and gpu/cuda (NVIDIA GPUs, with the
// build tag cuda). Package gpu builds its pools and scopes on it; users
// rarely see it, unless they bring a driver of their own (gpu.OpenDriver).
//
// Every method is safe for concurrent use. A driver never panics on bad
// input and never exits the process: it returns an error.
package driver

import (
	"fmt"
	"unsafe"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/vmm"
)

// ErrClosed is what every driver returns once it is closed. It is declared
// once for every layer (internal/errdefs): package gpu's ErrDeviceClosed
// and package pool's ErrClosed are the same error, so that errors.Is holds
// whichever layer noticed first.
var ErrClosed = errdefs.Closed

// Driver is one device.
type Driver interface {
	// Name describes the device, such as "host memory, 2.00 GiB" or
	// "NVIDIA H200".
	Name() string
	// MemInfo reports free and total bytes of the device.
	MemInfo() (free, total int64, err error)

	// Alloc returns size bytes of device memory.
	Alloc(size int64) (uintptr, error)
	// Free releases memory from Alloc.
	Free(ptr uintptr, size int64) error

	// CopyHtoD copies src to device address dst, ordered on stream (0: the
	// default stream), and returns when src may be reused.
	CopyHtoD(dst uintptr, src []byte, stream uintptr) error
	// CopyDtoH copies len(dst) bytes from device address src, ordered on
	// stream, and returns when dst holds them.
	CopyDtoH(dst []byte, src uintptr, stream uintptr) error
	// CopyDtoD copies n bytes between device addresses, ordered on stream.
	CopyDtoD(dst, src uintptr, n int64, stream uintptr) error
	// Memset sets n bytes at dst to v, ordered on stream.
	Memset(dst uintptr, v byte, n int64, stream uintptr) error

	// NewStream creates a stream: work on it runs in order.
	NewStream() (uintptr, error)
	// DestroyStream waits for a stream's work and destroys it.
	DestroyStream(stream uintptr) error
	// Synchronize waits until the work queued on stream has completed.
	Synchronize(stream uintptr) error

	// RecordEvent, EventDone, WaitEvent and DestroyEvent are the events the
	// pool uses for cross-stream reuse (pool.EventSource).
	RecordEvent(stream uintptr) (uintptr, error)
	EventDone(event uintptr) (bool, error)
	WaitEvent(event uintptr) error
	DestroyEvent(event uintptr) error

	// Close releases the device. Later calls fail with an error.
	Close() error
}

// PageMapper is the optional capability to reserve address space and map
// physical memory into it; the pool grows in place with it. It is
// [vmm.PageMapper], whose comments say what each method does, the same
// interface as pool.PageMapper. Each method is one driver call.
type PageMapper = vmm.PageMapper

// OutOfMemoryError is the error a driver returns when the device has no
// room. Package pool recognizes it by its method OutOfMemory.
type OutOfMemoryError struct {
	Requested int64
	Err       error // the driver's own error, if any
}

func (e *OutOfMemoryError) Error() string {
	msg := "device out of memory"
	if e.Err != nil {
		msg += ": " + prefixed.Text(e.Err)
	}
	return msg
}

// OutOfMemory reports true: the pool releases its cache and retries.
func (e *OutOfMemoryError) OutOfMemory() bool { return true }

// Unwrap returns the driver's own error.
func (e *OutOfMemoryError) Unwrap() error { return e.Err }

// NoStreamError is the error a driver returns for a stream it does not
// know: destroyed, or never made. Package pool recognizes it by its method
// StreamGone and takes the stream as retired, its work
// done: a driver's DestroyStream waits for the stream's work.
type NoStreamError struct {
	Driver string // the driver's package: "host", "cuda"
	Stream uintptr
}

// Error says which stream, with no package's prefix, as OutOfMemoryError:
// a layer above that wraps it says its own.
func (e *NoStreamError) Error() string {
	return fmt.Sprintf("stream %#x does not exist in the %s driver", e.Stream, e.Driver)
}

// StreamGone reports true: the stream's work, if it ever had any, is done.
func (e *NoStreamError) StreamGone() bool { return true }

// KernelLauncher is the optional capability to load compiled kernels and
// launch them. A driver without it cannot run kernels (the host device).
type KernelLauncher interface {
	// LoadModule loads a module from PTX (or a cubin) and returns its handle.
	LoadModule(image []byte) (uintptr, error)
	// UnloadModule unloads a module; its functions are gone with it.
	UnloadModule(module uintptr) error
	// Function returns the handle of a kernel of a loaded module.
	Function(module uintptr, name string) (uintptr, error)
	// Launch queues fn on stream with grid x block threads, shared bytes of
	// dynamic shared memory, and params: one 8-byte word per kernel
	// argument, each the argument's bits (a device address, an integer, a
	// float's bits). It returns once the launch is queued.
	Launch(fn uintptr, grid, block [3]int, shared int, stream uintptr, params []uint64) error
}

// HostAllocator is the optional capability to allocate page-locked host
// memory, from and to which copies run asynchronously on a stream.
type HostAllocator interface {
	// HostAlloc returns size bytes of page-locked host memory.
	HostAlloc(size int64) (unsafe.Pointer, error)
	// HostFree frees memory from HostAlloc, after the copies queued on it
	// have run.
	HostFree(p unsafe.Pointer) error
	// CopyHtoDAsync queues a copy of n bytes from page-locked src to device
	// address dst on stream and returns at once.
	CopyHtoDAsync(dst uintptr, src unsafe.Pointer, n int64, stream uintptr) error
	// CopyDtoHAsync queues a copy of n bytes from device address src to
	// page-locked dst on stream and returns at once.
	CopyDtoHAsync(dst unsafe.Pointer, src uintptr, n int64, stream uintptr) error
}

// PeerCopier is the optional capability to copy from another device's
// memory directly, without staging through the host.
type PeerCopier interface {
	// CopyPeer copies n bytes from address src of the device that from
	// drives to address dst of this one, and reports whether it could:
	// false, with no error, where from is not a device it copies from (the
	// caller then stages the copy through host memory).
	CopyPeer(dst uintptr, from Driver, src uintptr, n int64) (bool, error)
}

// HostAddressable is the optional capability of a device whose memory the
// program can address directly (the host device): code of the program's
// own, a tensor library, can then work on device memory in place.
type HostAddressable interface {
	// HostBytes returns the n bytes at device address ptr as a slice. It
	// is valid only while the memory is allocated.
	HostBytes(ptr uintptr, n int64) ([]byte, error)
}
