package host

import (
	"unsafe"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/handles"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

var _ driver.HostAllocator = (*Driver)(nil)

// HostAlloc implements driver.HostAllocator: on the host device, "pinned"
// memory is ordinary memory the driver keeps until HostFree. It holds at
// most the device's capacity at a time, on top of the device's memory: a
// request past that is out of memory, where the Go runtime would end the
// process instead.
func (d *Driver) HostAlloc(size int64) (unsafe.Pointer, error) {
	if size <= 0 {
		return nil, prefixed.Errorf("host", "HostAlloc(%d): size must be positive", size)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, driver.ErrClosed
	}
	held := d.pinnedHeld
	if size > d.capacity-held {
		return nil, &driver.OutOfMemoryError{Requested: size,
			Err: prefixed.Errorf("host", "HostAlloc of %d bytes, %d of %d held", size, held, d.capacity)}
	}
	mem := alignedBytes(size, hostAlignment)
	p := unsafe.Pointer(unsafe.SliceData(mem))
	d.pinned[p] = mem
	d.pinnedHeld += size
	return p, nil
}

// HostFree implements driver.HostAllocator. A copy still queued keeps the
// memory alive (it holds the pointer) until it has run.
func (d *Driver) HostFree(p unsafe.Pointer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	mem, ok := handles.Take(d.pinned, p)
	if !ok {
		return prefixed.Errorf("host", "HostFree(%p): not memory from HostAlloc", p)
	}
	d.pinnedHeld -= int64(len(mem))
	return nil
}

// pinnedBytes returns the n bytes at p, which must lie in one HostAlloc.
// Called with d.mu held.
func (d *Driver) pinnedBytes(p unsafe.Pointer, n int64) ([]byte, error) {
	for base, mem := range d.pinned {
		off := uintptr(p) - uintptr(base)
		if uintptr(p) >= uintptr(base) && off+uintptr(n) <= uintptr(len(mem)) {
			return mem[off : off+uintptr(n)], nil
		}
	}
	return nil, prefixed.Errorf("host", "%p+%d is not memory from HostAlloc", p, n)
}

// pinnedAt returns the pinned bytes at p, resolved now: a copy queued with
// them keeps them alive, whatever HostFree does before it runs.
func (d *Driver) pinnedAt(p unsafe.Pointer, n int64) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pinnedBytes(p, n)
}

// CopyHtoDAsync implements driver.HostAllocator.
func (d *Driver) CopyHtoDAsync(dst uintptr, src unsafe.Pointer, n int64, stream uintptr) error {
	return d.copyPinnedAsync(src, dst, n, stream, true)
}

// CopyDtoHAsync implements driver.HostAllocator.
func (d *Driver) CopyDtoHAsync(dst unsafe.Pointer, src uintptr, n int64, stream uintptr) error {
	return d.copyPinnedAsync(dst, src, n, stream, false)
}

// copyPinnedAsync queues a copy of n bytes on stream between the pinned
// memory at p, resolved now, and the device memory at dev, resolved when
// the copy runs: to the device, or from it.
func (d *Driver) copyPinnedAsync(p unsafe.Pointer, dev uintptr, n int64, stream uintptr, toDevice bool) error {
	pinned, err := d.pinnedAt(p, n)
	if err != nil {
		return err
	}
	return d.onStream(stream, false, func() error {
		mem, err := d.access(dev, n)
		if err != nil {
			return err
		}
		if toDevice {
			copy(mem, pinned)
		} else {
			copy(pinned, mem)
		}
		return nil
	})
}
