//go:build cuda

package cuda

import (
	"errors"
	"runtime"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/closing"
	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/handles"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// Driver is one CUDA device. It is safe for concurrent use.
type Driver struct {
	ordinal  int
	dev      cu.Device
	ctx      cu.CUContext
	name     string
	pageSize int64

	mu        sync.Mutex // protects the fields below
	closed    bool
	streams   map[uintptr]cu.Stream
	adopted   map[uintptr]uintptr // streams other code made (AdoptStream): their native handle's id
	events    map[uintptr]cu.Event
	modules   map[uintptr]cu.Module
	functions map[uintptr]cu.Function
	peers     map[*Driver]bool // whether each other device's memory is reachable directly
	nextID    uintptr
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.PageMapper = (*Driver)(nil)
)

// Count returns the number of CUDA devices.
func Count() (int, error) {
	n, err := cu.NumDevices()
	return n, wrap("cuDeviceGetCount", err)
}

// Info describes a device without opening it.
func Info(ordinal int) (name string, total int64, err error) {
	n, err := Count()
	if err != nil {
		return "", 0, err
	}
	if ordinal < 0 || ordinal >= n {
		return "", 0, prefixed.Kind("cuda", errdefs.NoDevice, "ordinal %d of %d", ordinal, n)
	}
	d, err := cu.GetDevice(ordinal)
	if err != nil {
		return "", 0, wrap("cuDeviceGet", err)
	}
	if name, err = d.Name(); err != nil {
		return "", 0, wrap("cuDeviceGetName", err)
	}
	total, err = d.TotalMem()
	return name, total, wrap("cuDeviceTotalMem", err)
}

// Open retains the primary context of device ordinal.
func Open(ordinal int) (*Driver, error) {
	name, _, err := Info(ordinal)
	if err != nil {
		return nil, err
	}
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return nil, wrap("cuDeviceGet", err)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		return nil, wrap("cuDevicePrimaryCtxRetain", err)
	}
	d := &Driver{ordinal: ordinal, dev: dev, ctx: ctx, name: name,
		streams: map[uintptr]cu.Stream{0: {}}, adopted: map[uintptr]uintptr{}, events: map[uintptr]cu.Event{}, nextID: 1,
		modules: map[uintptr]cu.Module{}, functions: map[uintptr]cu.Function{}, peers: map[*Driver]bool{}}
	err = d.do(func() error {
		var err error
		d.pageSize, err = granularity(ordinal)
		return err
	})
	if err != nil {
		return nil, errors.Join(err, wrap("cuDevicePrimaryCtxRelease", dev.ReleasePrimaryCtx()))
	}
	return d, nil
}

var _ driver.KernelLauncher = (*Driver)(nil)

// LoadModule implements driver.KernelLauncher with cuModuleLoadData.
func (d *Driver) LoadModule(image []byte) (uintptr, error) {
	if err := d.open(); err != nil {
		return 0, err
	}
	return create(d, d.modules, "cuModuleLoadData", func() (cu.Module, error) { return cu.LoadData(string(image)) })
}

// create calls call, the driver call op, on the driver's thread and keeps
// what it made in m under a new handle.
func create[V any](d *Driver, m map[uintptr]V, op string, call func() (V, error)) (uintptr, error) {
	var id uintptr
	err := d.do(func() error {
		v, err := call()
		if err != nil {
			return wrap(op, err)
		}
		d.mu.Lock()
		id = handles.Add(m, &d.nextID, v)
		d.mu.Unlock()
		return nil
	})
	return id, err
}

// UnloadModule implements driver.KernelLauncher with cuModuleUnload.
func (d *Driver) UnloadModule(module uintptr) error {
	mod, ok := take(d, func() map[uintptr]cu.Module { return d.modules }, module)
	if !ok {
		return prefixed.Errorf("cuda", "module %#x is not loaded", module)
	}
	return d.do(func() error { return wrap("cuModuleUnload", mod.Unload()) })
}

// Function implements driver.KernelLauncher with cuModuleGetFunction.
func (d *Driver) Function(module uintptr, name string) (uintptr, error) {
	d.mu.Lock()
	mod, ok := d.modules[module]
	d.mu.Unlock()
	if !ok {
		return 0, prefixed.Errorf("cuda", "module %#x is not loaded", module)
	}
	return create(d, d.functions, "cuModuleGetFunction", func() (cu.Function, error) { return mod.Function(name) })
}

// Launch implements driver.KernelLauncher with cuLaunchKernel.
func (d *Driver) Launch(fn uintptr, grid, block [3]int, shared int, stream uintptr, params []uint64) error {
	st, err := d.stream(stream)
	if err != nil {
		return err
	}
	d.mu.Lock()
	f, ok := d.functions[fn]
	d.mu.Unlock()
	if !ok {
		return prefixed.Errorf("cuda", "function %#x does not exist", fn)
	}
	words := append([]uint64(nil), params...) // cu copies 8 bytes from each
	ptrs := make([]unsafe.Pointer, len(words))
	for i := range words {
		ptrs[i] = unsafe.Pointer(&words[i])
	}
	return d.do(func() error {
		return wrap("cuLaunchKernel", f.Launch(grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, st, ptrs))
	})
}

var _ driver.PeerCopier = (*Driver)(nil)

// PeerAccess reports whether this device can reach other's memory
// directly (cuDeviceCanAccessPeer), and enables that access the first
// time.
func (d *Driver) PeerAccess(other *Driver) (bool, error) {
	d.mu.Lock()
	known, ok := d.peers[other]
	d.mu.Unlock()
	if ok {
		return known, nil
	}
	var can bool
	err := d.do(func() error {
		n, err := d.dev.CanAccessPeer(other.dev)
		if err != nil {
			return wrap("cuDeviceCanAccessPeer", err)
		}
		if can = n != 0; can {
			return enablePeer(other.ctx)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	d.mu.Lock()
	d.peers[other] = can
	d.mu.Unlock()
	return can, nil
}

// CopyPeer implements driver.PeerCopier with cuMemcpyPeer, after enabling
// peer access where the two devices allow it (where they do not, the CUDA
// driver stages the copy itself).
func (d *Driver) CopyPeer(dst uintptr, from driver.Driver, src uintptr, n int64) (bool, error) {
	other, ok := from.(*Driver)
	if !ok || other == d {
		return false, nil
	}
	if err := d.open(); err != nil {
		return true, err
	}
	if _, err := d.PeerAccess(other); err != nil {
		return true, err
	}
	return true, d.do(func() error {
		return wrap("cuMemcpyPeer", cu.MemcpyPeer(cu.DevicePtr(dst), d.ctx, cu.DevicePtr(src), other.ctx, n))
	})
}

var _ driver.HostAllocator = (*Driver)(nil)

// HostAlloc implements driver.HostAllocator with cuMemHostAlloc.
func (d *Driver) HostAlloc(size int64) (p unsafe.Pointer, err error) {
	if err := d.open(); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, prefixed.Errorf("cuda", "HostAlloc(%d): size must be positive", size)
	}
	err = d.do(func() error {
		var err error
		p, err = hostAlloc(size)
		return err
	})
	return p, err
}

// HostFree implements driver.HostAllocator: it waits for the context's
// work (copies from the memory may still be queued on any stream), then
// calls cuMemFreeHost.
func (d *Driver) HostFree(p unsafe.Pointer) error {
	if err := d.open(); err != nil {
		return err
	}
	return d.do(func() error {
		if err := cu.Synchronize(); err != nil {
			return wrap("cuCtxSynchronize", err)
		}
		return wrap("cuMemFreeHost", cu.MemFreeHost(p))
	})
}

// CopyHtoDAsync implements driver.HostAllocator with cuMemcpyHtoDAsync.
func (d *Driver) CopyHtoDAsync(dst uintptr, src unsafe.Pointer, n int64, stream uintptr) error {
	st, err := d.stream(stream)
	if err != nil {
		return err
	}
	return d.do(func() error {
		return wrap("cuMemcpyHtoDAsync", cu.MemcpyHtoDAsync(cu.DevicePtr(dst), src, n, st))
	})
}

// CopyDtoHAsync implements driver.HostAllocator with cuMemcpyDtoHAsync.
func (d *Driver) CopyDtoHAsync(dst unsafe.Pointer, src uintptr, n int64, stream uintptr) error {
	st, err := d.stream(stream)
	if err != nil {
		return err
	}
	return d.do(func() error {
		return wrap("cuMemcpyDtoHAsync", cu.MemcpyDtoHAsync(dst, cu.DevicePtr(src), n, st))
	})
}

// do runs fn on a locked OS thread with the device's context current:
// every call into CUDA goes through it. Another context current on the
// thread is put back after: a call from a C library's thread (gpu/capi)
// leaves the library the context it had, another device's say. A thread
// with none keeps the device's, so that the next call on it sets nothing.
func (d *Driver) do(fn func() error) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := cu.CurrentContext()
	if err != nil {
		return wrap("cuCtxGetCurrent", err)
	}
	if prev != d.ctx {
		if err := cu.SetCurrentContext(d.ctx); err != nil {
			return wrap("cuCtxSetCurrent", err)
		}
		if prev != (cu.CUContext{}) {
			defer func() { err = errors.Join(err, wrap("cuCtxSetCurrent", cu.SetCurrentContext(prev))) }()
		}
	}
	return fn()
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return d.name }

func (d *Driver) open() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return driver.ErrClosed
	}
	return nil
}

// MemInfo implements driver.Driver.
func (d *Driver) MemInfo() (free, total int64, err error) {
	if err := d.open(); err != nil {
		return 0, 0, err
	}
	err = d.do(func() error {
		var err error
		free, total, err = cu.MemInfo()
		return wrap("cuMemGetInfo", err)
	})
	return free, total, err
}

// Alloc implements driver.Driver with cuMemAlloc.
func (d *Driver) Alloc(size int64) (ptr uintptr, err error) {
	if err := d.open(); err != nil {
		return 0, err
	}
	if size <= 0 {
		return 0, prefixed.Errorf("cuda", "Alloc(%d): size must be positive", size)
	}
	err = d.do(func() error {
		p, err := cu.MemAlloc(size)
		ptr = uintptr(p)
		return wrap("cuMemAlloc", err)
	})
	return ptr, err
}

// Free implements driver.Driver with cuMemFree, whose error is returned.
func (d *Driver) Free(ptr uintptr, size int64) error {
	if err := d.open(); err != nil {
		return err
	}
	return d.do(func() error { return wrap("cuMemFree", cu.MemFree(cu.DevicePtr(ptr))) })
}

func (d *Driver) stream(s uintptr) (cu.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return cu.Stream{}, driver.ErrClosed
	}
	st, ok := d.streams[s]
	if !ok {
		return cu.Stream{}, &driver.NoStreamError{Driver: "cuda", Stream: s}
	}
	return st, nil
}

// CopyHtoD implements driver.Driver.
func (d *Driver) CopyHtoD(dst uintptr, src []byte, stream uintptr) error {
	st, err := d.stream(stream)
	if err != nil || len(src) == 0 {
		return err
	}
	return d.do(func() error {
		if err := cu.MemcpyHtoDAsync(cu.DevicePtr(dst), unsafe.Pointer(&src[0]), int64(len(src)), st); err != nil {
			return wrap("cuMemcpyHtoDAsync", err)
		}
		// src is Go memory: wait before it may be reused or moved.
		return wrap("cuStreamSynchronize", st.Synchronize())
	})
}

// CopyDtoH implements driver.Driver.
func (d *Driver) CopyDtoH(dst []byte, src uintptr, stream uintptr) error {
	st, err := d.stream(stream)
	if err != nil || len(dst) == 0 {
		return err
	}
	return d.do(func() error {
		if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), cu.DevicePtr(src), int64(len(dst)), st); err != nil {
			return wrap("cuMemcpyDtoHAsync", err)
		}
		return wrap("cuStreamSynchronize", st.Synchronize())
	})
}

// CopyDtoD implements driver.Driver.
func (d *Driver) CopyDtoD(dst, src uintptr, n int64, stream uintptr) error {
	st, err := d.stream(stream)
	if err != nil || n == 0 {
		return err
	}
	return d.do(func() error {
		if err := cu.MemcpyDtoDAsync(cu.DevicePtr(dst), cu.DevicePtr(src), n, st); err != nil {
			return wrap("cuMemcpyDtoDAsync", err)
		}
		return wrap("cuStreamSynchronize", st.Synchronize())
	})
}

// Memset implements driver.Driver.
func (d *Driver) Memset(dst uintptr, v byte, n int64, stream uintptr) error {
	st, err := d.stream(stream)
	if err != nil || n == 0 {
		return err
	}
	return d.do(func() error {
		if err := cu.MemsetD8Async(cu.DevicePtr(dst), v, n, st); err != nil {
			return wrap("cuMemsetD8Async", err)
		}
		return wrap("cuStreamSynchronize", st.Synchronize())
	})
}

// NewStream implements driver.Driver.
func (d *Driver) NewStream() (uintptr, error) {
	if err := d.open(); err != nil {
		return 0, err
	}
	var st cu.Stream
	err := d.do(func() error {
		var err error
		st, err = cu.MakeStream(cu.NonBlocking)
		return wrap("cuStreamCreate", err)
	})
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return handles.Add(d.streams, &d.nextID, st), nil
}

// AdoptStream returns the id the driver knows the stream of handle h by, a
// CUstream (a cudaStream_t) that other code made, such as a library's: the
// same id for the same h, for the driver's life (gpu.Scope.UseStream calls
// it). 0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are streams too. The
// driver never destroys it: its maker does.
func (d *Driver) AdoptStream(h uintptr) (uintptr, error) {
	if h == 0 {
		return 0, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, driver.ErrClosed
	}
	if id, ok := d.adopted[h]; ok {
		return id, nil
	}
	st := *(*cu.Stream)(unsafe.Pointer(&h)) // a cu.Stream is its CUstream
	id := handles.Add(d.streams, &d.nextID, st)
	d.adopted[h] = id
	return id, nil
}

// DestroyStream implements driver.Driver. A stream other code made
// (AdoptStream) is its maker's to destroy: it is refused.
func (d *Driver) DestroyStream(s uintptr) error {
	if d.isAdopted(s) {
		return prefixed.Errorf("cuda", "DestroyStream(%#x): a stream other code made is not the driver's to destroy", s)
	}
	st, ok := take(d, func() map[uintptr]cu.Stream { return d.streams }, s)
	if !ok {
		return prefixed.Errorf("cuda", "DestroyStream(%#x): no such stream", s)
	}
	return d.do(func() error {
		if err := st.Synchronize(); err != nil {
			return wrap("cuStreamSynchronize", err)
		}
		return wrap("cuStreamDestroy", st.Destroy())
	})
}

// Synchronize implements driver.Driver.
func (d *Driver) Synchronize(s uintptr) error {
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	return d.do(func() error { return wrap("cuStreamSynchronize", st.Synchronize()) })
}

// RecordEvent implements driver.Driver.
func (d *Driver) RecordEvent(s uintptr) (uintptr, error) {
	st, err := d.stream(s)
	if err != nil {
		return 0, err
	}
	var ev cu.Event
	err = d.do(func() error {
		var err error
		if ev, err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return wrap("cuEventCreate", err)
		}
		if err := ev.Record(st); err != nil {
			return errors.Join(wrap("cuEventRecord", err), wrap("cuEventDestroy", cu.DestroyEvent(&ev)))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return handles.Add(d.events, &d.nextID, ev), nil
}

func (d *Driver) event(id uintptr) (cu.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ev, ok := d.events[id]
	if !ok {
		return cu.Event{}, prefixed.Errorf("cuda", "event %#x does not exist", id)
	}
	return ev, nil
}

// EventDone implements driver.Driver with cuEventQuery; it never blocks.
func (d *Driver) EventDone(id uintptr) (bool, error) {
	ev, err := d.event(id)
	if err != nil {
		return false, err
	}
	var done bool
	err = d.do(func() error {
		err := ev.Query()
		if err == nil {
			done = true
			return nil
		}
		if err == cu.NotReady {
			return nil
		}
		return wrap("cuEventQuery", err)
	})
	return done, err
}

// WaitEvent implements driver.Driver.
func (d *Driver) WaitEvent(id uintptr) error {
	ev, err := d.event(id)
	if err != nil {
		return err
	}
	return d.do(func() error { return wrap("cuEventSynchronize", ev.Synchronize()) })
}

// DestroyEvent implements driver.Driver.
func (d *Driver) DestroyEvent(id uintptr) error {
	ev, ok := take(d, func() map[uintptr]cu.Event { return d.events }, id)
	if !ok {
		return prefixed.Errorf("cuda", "DestroyEvent(%#x): no such event", id)
	}
	return d.do(func() error { return wrap("cuEventDestroy", cu.DestroyEvent(&ev)) })
}

// Granularity implements driver.PageMapper: the allocation granularity.
func (d *Driver) Granularity() int64 { return d.pageSize }

// ReserveAddress implements driver.PageMapper.
func (d *Driver) ReserveAddress(size int64) (ptr uintptr, err error) {
	err = d.doSized(size, func() (err error) {
		ptr, err = reserveAddress(size, d.pageSize)
		return err
	})
	return ptr, err
}

// ReleaseAddress implements driver.PageMapper.
func (d *Driver) ReleaseAddress(ptr uintptr, size int64) error {
	return d.do(func() error { return freeAddress(ptr, size) })
}

// Create implements driver.PageMapper with cuMemCreate.
func (d *Driver) Create(size int64) (h uint64, err error) {
	err = d.doSized(size, func() (err error) {
		h, err = createHandle(size, d.ordinal)
		return err
	})
	return h, err
}

// doSized runs fn on the driver's thread for a call that takes size bytes,
// once the driver is open and size is in range.
func (d *Driver) doSized(size int64, fn func() error) error {
	if err := d.open(); err != nil {
		return err
	}
	if err := d.checkRange(0, size); err != nil {
		return err
	}
	return d.do(fn)
}

// Release implements driver.PageMapper with cuMemRelease.
func (d *Driver) Release(h uint64) error {
	return d.do(func() error { return releaseHandle(h) })
}

// Map implements driver.PageMapper with cuMemMap.
func (d *Driver) Map(ptr uintptr, size int64, h uint64) error {
	if err := d.open(); err != nil {
		return err
	}
	if err := d.checkRange(ptr, size); err != nil {
		return err
	}
	return d.do(func() error { return mapHandle(ptr, size, h) })
}

// SetAccess implements driver.PageMapper with cuMemSetAccess: read and
// write for this device.
func (d *Driver) SetAccess(ptr uintptr, size int64) error {
	if err := d.open(); err != nil {
		return err
	}
	if err := d.checkRange(ptr, size); err != nil {
		return err
	}
	return d.do(func() error { return setAccess(ptr, size, d.ordinal) })
}

// Unmap implements driver.PageMapper with cuMemUnmap.
func (d *Driver) Unmap(ptr uintptr, size int64) error {
	if err := d.checkRange(ptr, size); err != nil {
		return err
	}
	return d.do(func() error { return unmap(ptr, size) })
}

// checkRange refuses what the driver would: sizes that are not positive
// multiples of the granularity, unaligned addresses.
func (d *Driver) checkRange(ptr uintptr, size int64) error {
	if size <= 0 || size%d.pageSize != 0 || int64(ptr)%d.pageSize != 0 {
		return prefixed.Errorf("cuda", "%#x, %d bytes: not whole granules of %d bytes", ptr, size, d.pageSize)
	}
	return nil
}

// isAdopted reports whether stream id is one other code made.
func (d *Driver) isAdopted(id uintptr) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.adopted {
		if a == id {
			return true
		}
	}
	return false
}

// Close implements driver.Driver: it destroys the streams and events it
// made and releases the primary context.
func (d *Driver) Close() error {
	var streams map[uintptr]cu.Stream
	var events map[uintptr]cu.Event
	if !closing.Once(&d.mu, &d.closed, func() {
		streams, events = d.streams, d.events
		for _, id := range d.adopted {
			delete(streams, id) // their makers' to destroy
		}
		d.streams, d.events, d.adopted = map[uintptr]cu.Stream{}, map[uintptr]cu.Event{}, map[uintptr]uintptr{}
	}) {
		return nil
	}
	var errs []error
	err := d.do(func() error {
		for id, st := range streams {
			if id != 0 {
				errs = append(errs, wrap("cuStreamDestroy", st.Destroy()))
			}
		}
		for _, ev := range events {
			errs = append(errs, wrap("cuEventDestroy", cu.DestroyEvent(&ev)))
		}
		return nil
	})
	errs = append(errs, err, wrap("cuDevicePrimaryCtxRelease", d.dev.ReleasePrimaryCtx()))
	return errors.Join(errs...)
}

// take removes handle id from the table of, read under d.mu since Close
// replaces the tables, and returns what it held.
func take[T any](d *Driver, of func() map[uintptr]T, id uintptr) (T, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return handles.Take(of(), id)
}
