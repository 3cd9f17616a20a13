package gputest

import "unsafe"

// The driver calls a faultDriver can make fail, each as its Op says.

func (d *faultDriver) Alloc(size int64) (uintptr, error) {
	return failOr(d, OpAlloc, "Alloc", size, func() (uintptr, error) { return d.Driver.Alloc(size) })
}

func (d *faultDriver) Free(ptr uintptr, size int64) error {
	return d.failOr(OpFree, "Free", size, func() error { return d.Driver.Free(ptr, size) })
}

func (d *faultDriver) HostAlloc(size int64) (unsafe.Pointer, error) {
	return failOr(d, OpAlloc, "HostAlloc", size, func() (unsafe.Pointer, error) { return d.Driver.HostAlloc(size) })
}

func (d *faultDriver) HostFree(p unsafe.Pointer) error {
	return d.failOr(OpFree, "HostFree", 0, func() error { return d.Driver.HostFree(p) })
}

func (d *faultDriver) CopyHtoD(dst uintptr, src []byte, stream uintptr) error {
	return d.failOr(OpCopy, "CopyHtoD", int64(len(src)), func() error { return d.Driver.CopyHtoD(dst, src, stream) })
}

func (d *faultDriver) CopyDtoH(dst []byte, src uintptr, stream uintptr) error {
	return d.failOr(OpCopy, "CopyDtoH", int64(len(dst)), func() error { return d.Driver.CopyDtoH(dst, src, stream) })
}

func (d *faultDriver) CopyDtoD(dst, src uintptr, n int64, stream uintptr) error {
	return d.failOr(OpCopy, "CopyDtoD", n, func() error { return d.Driver.CopyDtoD(dst, src, n, stream) })
}

func (d *faultDriver) Memset(dst uintptr, v byte, n int64, stream uintptr) error {
	return d.failOr(OpCopy, "Memset", n, func() error { return d.Driver.Memset(dst, v, n, stream) })
}

func (d *faultDriver) CopyHtoDAsync(dst uintptr, src unsafe.Pointer, n int64, stream uintptr) error {
	return d.failOr(OpCopy, "CopyHtoDAsync", n, func() error { return d.Driver.CopyHtoDAsync(dst, src, n, stream) })
}

func (d *faultDriver) CopyDtoHAsync(dst unsafe.Pointer, src uintptr, n int64, stream uintptr) error {
	return d.failOr(OpCopy, "CopyDtoHAsync", n, func() error { return d.Driver.CopyDtoHAsync(dst, src, n, stream) })
}

func (d *faultDriver) NewStream() (uintptr, error) {
	return failOr(d, OpStream, "NewStream", 0, d.Driver.NewStream)
}

func (d *faultDriver) Synchronize(stream uintptr) error {
	return d.failOr(OpStream, "Synchronize", 0, func() error { return d.Driver.Synchronize(stream) })
}

func (d *faultDriver) DestroyStream(stream uintptr) error {
	return d.failOr(OpStream, "DestroyStream", 0, func() error { return d.Driver.DestroyStream(stream) })
}

func (d *faultDriver) RecordEvent(stream uintptr) (uintptr, error) {
	return failOr(d, OpEvent, "RecordEvent", 0, func() (uintptr, error) { return d.Driver.RecordEvent(stream) })
}

func (d *faultDriver) EventDone(ev uintptr) (bool, error) {
	return failOr(d, OpEvent, "EventDone", 0, func() (bool, error) { return d.Driver.EventDone(ev) })
}

func (d *faultDriver) WaitEvent(ev uintptr) error {
	return d.failOr(OpEvent, "WaitEvent", 0, func() error { return d.Driver.WaitEvent(ev) })
}

func (d *faultDriver) DestroyEvent(ev uintptr) error {
	return d.failOr(OpEvent, "DestroyEvent", 0, func() error { return d.Driver.DestroyEvent(ev) })
}
