// Package host is a gpuscope driver whose device memory is host RAM with a
// hard capacity. It is the default device: CI, laptops and new users run on
// it. It behaves like a real driver where it matters to tests: it refuses
// memory beyond its capacity with an out-of-memory error, detects double
// frees and unknown pointers, bounds-checks every copy, and poisons freed
// memory. Package gputest wraps it in a driver whose operations a test can
// make fail (gputest.OpenFaulty).
//
// On Linux it also emulates CUDA's virtual memory calls ([Driver.Create],
// [Driver.Map], [Driver.SetAccess]) with mmap over a memfd, so the pool grows
// in place as it does on a GPU.
//
// Streams are real: each stream but the default one is a queue of work run
// in order by a goroutine of its own, not in step with the default stream
// (as CUDA's non-blocking streams). Copies to and from the host return when
// done; Memset and device-to-device copies on a stream return at once. An
// event is done when the work queued before it has run. [Driver.Enqueue]
// puts work of a test's own on a stream and [Driver.Hold] keeps one busy,
// so that the pool's stream rules are tested without a GPU.
//
// The package is internal to gpu: users open it with gpu.OpenHost, and
// tests reach its controls through gputest.
package host

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/closing"
	"github.com/gpuscope/gpuscope/internal/handles"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
)

// PoisonByte is written over memory when it is freed, so that a read of
// freed memory shows an unmistakable pattern.
const PoisonByte = 0xDB

// hostAlignment is the alignment of the host device's allocations.
const hostAlignment = 512

// alignedBytes returns n bytes starting at a multiple of align.
func alignedBytes(n int64, align int) []byte {
	buf := make([]byte, n+int64(align))
	off := (align - int(addrOf(buf)%uintptr(align))) % align
	return buf[off : int64(off)+n : int64(off)+n]
}

// poison fills mem with PoisonByte, at the speed of a copy.
func poison(mem []byte) {
	if len(mem) == 0 {
		return
	}
	mem[0] = PoisonByte
	for n := 1; n < len(mem); n *= 2 {
		copy(mem[n:], mem[:n])
	}
}

// Driver is a host-memory device. It is safe for concurrent use.
type Driver struct {
	capacity int64

	mu         sync.Mutex // protects the fields below
	used       int64
	segs       []hostSeg // sorted by ptr
	closed     bool
	streams    map[uintptr]*stream // 0, the default stream, maps to nil
	adopted    map[uintptr]uintptr // handles other code named (AdoptStream): the id of their stream
	nextID     uintptr
	events     map[uintptr]event
	pinned     map[unsafe.Pointer][]byte // HostAlloc's memory, until HostFree
	pinnedHeld int64                     // the bytes of pinned
	vm         vmState                   // page mapping (pages_linux.go)
}

type hostSeg struct {
	ptr uintptr
	mem []byte
}

var _ driver.Driver = (*Driver)(nil)

// PageSize is the host device's granularity, the H200's: where pages are
// mapped (Linux), the size of one; elsewhere, the pool's smallest segment
// is as large. A device smaller than this can hold no allocation.
const PageSize = 2 << 20

// New returns a host device of capacity bytes. A capacity beyond the
// machine's memory is refused: the Go runtime cannot recover from running
// out of it, so the device must run out first.
func New(capacity int64) (*Driver, error) {
	if capacity <= 0 {
		return nil, prefixed.Errorf("host", "capacity %d must be positive", capacity)
	}
	if ram, ok := physicalMemory(); ok && capacity > ram {
		return nil, prefixed.Errorf("host", "capacity of %d bytes exceeds this machine's %d bytes of memory", capacity, ram)
	}
	openDrivers.Add(1)
	return &Driver{capacity: capacity, streams: map[uintptr]*stream{0: nil}, events: map[uintptr]event{}, pinned: map[unsafe.Pointer][]byte{},
		nextID: uintptr(driversMade.Add(1) << 32), vm: newVM()}, nil
}

// driversMade numbers the drivers New made: each numbers its streams and
// events from its own number times 2^32 (on 64-bit machines), so that a
// stream of one is never a stream of another, as with CUDA, and a call
// that mixes devices fails instead of reaching another device's stream.
var driversMade atomic.Uint64

// openDrivers counts the drivers not yet closed, whose memory and memfd an
// unclosed driver would keep; the package's tests check it ends at zero.
var openDrivers atomic.Int64

// Name implements driver.Driver.
func (d *Driver) Name() string { return "host memory, " + units.FormatBytes(d.capacity) }

// MemInfo implements driver.Driver.
func (d *Driver) MemInfo() (free, total int64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, 0, driver.ErrClosed
	}
	return d.capacity - d.used, d.capacity, nil
}

// checkOpen is where every operation starts: driver.ErrClosed once the
// driver is closed. Called with d.mu held.
func (d *Driver) checkOpen() error {
	if d.closed {
		return driver.ErrClosed
	}
	return nil
}

// whileOpen runs fn with d.mu held, once the driver is open.
func (d *Driver) whileOpen(fn func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return err
	}
	return fn()
}

// Alloc implements driver.Driver.
func (d *Driver) Alloc(size int64) (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return 0, err
	}
	if size <= 0 {
		return 0, prefixed.Errorf("host", "Alloc(%d): size must be positive", size)
	}
	if d.used+size > d.capacity {
		return 0, &driver.OutOfMemoryError{Requested: size,
			Err: prefixed.Errorf("host", "%d bytes asked, %d of %d in use", size, d.used, d.capacity)}
	}
	// Aligned as cudaMalloc's allocations are (the pool refuses less): a
	// large Go allocation is page aligned in practice, not by promise.
	mem := alignedBytes(size, hostAlignment)
	ptr := addrOf(mem)
	i := sort.Search(len(d.segs), func(i int) bool { return d.segs[i].ptr > ptr })
	d.segs = append(d.segs, hostSeg{})
	copy(d.segs[i+1:], d.segs[i:])
	d.segs[i] = hostSeg{ptr: ptr, mem: mem}
	d.used += size
	return ptr, nil
}

// Free implements driver.Driver. Freed memory is poisoned.
func (d *Driver) Free(ptr uintptr, size int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return err
	}
	i := sort.Search(len(d.segs), func(i int) bool { return d.segs[i].ptr >= ptr })
	if i == len(d.segs) || d.segs[i].ptr != ptr {
		return prefixed.Errorf("host", "Free(%#x): not an allocation of this device (double free?)", ptr)
	}
	if int64(len(d.segs[i].mem)) != size {
		return prefixed.Errorf("host", "Free(%#x, %d): allocated with %d bytes", ptr, size, len(d.segs[i].mem))
	}
	poison(d.segs[i].mem)
	d.segs = append(d.segs[:i], d.segs[i+1:]...)
	d.used -= size
	return nil
}

// resolve returns the memory at [ptr, ptr+n), in an allocation or on
// mapped pages. Called with d.mu held.
func (d *Driver) resolve(ptr uintptr, n int64) ([]byte, error) {
	if mem, ok, err := d.resolveMapped(ptr, n); ok {
		return mem, err
	}
	i := sort.Search(len(d.segs), func(i int) bool { return d.segs[i].ptr > ptr }) - 1
	if i < 0 || n < 0 {
		return nil, prefixed.Errorf("host", "address %#x (%d bytes) is not device memory", ptr, n)
	}
	s := d.segs[i]
	off := int64(ptr - s.ptr)
	if off+n > int64(len(s.mem)) {
		return nil, prefixed.Errorf("host", "range %#x+%d is not device memory", ptr, n)
	}
	return s.mem[off : off+n], nil
}

func (d *Driver) checkStream(stream uintptr) error {
	if _, ok := d.streams[stream]; !ok {
		return noStreamError(stream)
	}
	return nil
}

// access checks an operation on n bytes at ptr and returns the memory.
// Called with d.mu held.
func (d *Driver) access(ptr uintptr, n int64) ([]byte, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	return d.resolve(ptr, n)
}

// CopyHtoD implements driver.Driver.
func (d *Driver) CopyHtoD(dst uintptr, src []byte, stream uintptr) error {
	return d.onStream(stream, true, func() error {
		mem, err := d.access(dst, int64(len(src)))
		if err == nil {
			copy(mem, src)
		}
		return err
	})
}

// CopyDtoH implements driver.Driver.
func (d *Driver) CopyDtoH(dst []byte, src uintptr, stream uintptr) error {
	return d.onStream(stream, true, func() error {
		mem, err := d.access(src, int64(len(dst)))
		if err == nil {
			copy(dst, mem)
		}
		return err
	})
}

// CopyDtoD implements driver.Driver. On a stream other than the default
// one it returns at once; an error is reported by the stream's Synchronize.
func (d *Driver) CopyDtoD(dst, src uintptr, n int64, stream uintptr) error {
	return d.onStream(stream, false, func() error {
		to, err := d.access(dst, n)
		if err != nil {
			return err
		}
		from, err := d.resolve(src, n)
		if err == nil {
			copy(to, from)
		}
		return err
	})
}

// Memset implements driver.Driver. On a stream other than the default one
// it returns at once; an error is reported by the stream's Synchronize.
func (d *Driver) Memset(dst uintptr, v byte, n int64, stream uintptr) error {
	return d.onStream(stream, false, func() error {
		mem, err := d.access(dst, n)
		if err == nil {
			for i := range mem {
				mem[i] = v
			}
		}
		return err
	})
}

// NewStream implements driver.Driver.
func (d *Driver) NewStream() (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, driver.ErrClosed
	}
	return handles.Add(d.streams, &d.nextID, newStream()), nil
}

// AdoptStream returns the id the driver knows the stream of handle h by,
// as the CUDA driver's does for a stream other code made: h itself where it
// is one of the driver's streams (0, NewStream's), else a stream the driver
// makes for h on first use, the same for the same h for the driver's life.
// Such a stream is its maker's: DestroyStream refuses it, Close ends it.
// gpu.Scope.UseStream calls it, so that a library on the host device may
// name streams of its own (libgpuscope's tests, a C library in host mode).
func (d *Driver) AdoptStream(h uintptr) (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, driver.ErrClosed
	}
	if _, ok := d.streams[h]; ok {
		return h, nil
	}
	if id, ok := d.adopted[h]; ok {
		return id, nil
	}
	if d.adopted == nil {
		d.adopted = map[uintptr]uintptr{}
	}
	id := handles.Add(d.streams, &d.nextID, newStream())
	d.adopted[h] = id
	return id, nil
}

// DestroyStream implements driver.Driver: it waits for the stream's work,
// stops its goroutine, and reports the first error of its asynchronous
// work. A stream made for another's handle (AdoptStream) is refused.
func (d *Driver) DestroyStream(stream uintptr) error {
	d.mu.Lock()
	for h, id := range d.adopted {
		if id == stream {
			d.mu.Unlock()
			return prefixed.Errorf("host", "DestroyStream(%#x): the stream of handle %#x is its maker's to destroy", stream, h)
		}
	}
	s, ok := handles.Take(d.streams, stream)
	d.mu.Unlock()
	if !ok {
		return prefixed.Errorf("host", "DestroyStream(%#x): no such stream", stream)
	}
	return s.end()
}

// Synchronize implements driver.Driver: it waits for the work queued on
// stream and reports the first error of its asynchronous work.
func (d *Driver) Synchronize(stream uintptr) error {
	s, err := d.lookup(stream)
	if err != nil || s == nil {
		return err
	}
	return s.drain()
}

// RecordEvent implements driver.Driver: the event is done when the work
// queued on stream so far has run.
func (d *Driver) RecordEvent(stream uintptr) (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return 0, err
	}
	if err := d.checkStream(stream); err != nil {
		return 0, err
	}
	e := event{s: d.streams[stream]}
	if e.s != nil {
		e.s.mu.Lock()
		e.pos = e.s.queued
		e.s.mu.Unlock()
	}
	return handles.Add(d.events, &d.nextID, e), nil
}

func (d *Driver) event(ev uintptr) (event, error) {
	e, ok := d.events[ev]
	if !ok {
		return event{}, prefixed.Errorf("host", "event %#x does not exist", ev)
	}
	return e, nil
}

// EventDone implements driver.Driver.
func (d *Driver) EventDone(ev uintptr) (bool, error) {
	d.mu.Lock()
	e, err := d.event(ev)
	d.mu.Unlock()
	return err == nil && e.isDone(), err
}

// WaitEvent implements driver.Driver.
func (d *Driver) WaitEvent(ev uintptr) error {
	d.mu.Lock()
	if err := d.checkOpen(); err != nil {
		d.mu.Unlock()
		return err
	}
	e, err := d.event(ev)
	d.mu.Unlock()
	if err == nil && e.s != nil {
		e.s.waitFor(e.pos)
	}
	return err
}

// DestroyEvent implements driver.Driver.
func (d *Driver) DestroyEvent(ev uintptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.event(ev); err != nil {
		return err
	}
	delete(d.events, ev)
	return nil
}

// Close implements driver.Driver. As a GPU's context does, it frees
// everything the device holds; memory still allocated is reported as a leak.
func (d *Driver) Close() error {
	var streams []*stream
	if !closing.Once(&d.mu, &d.closed, func() {
		for id, s := range d.streams {
			if s != nil {
				streams = append(streams, s)
				delete(d.streams, id)
			}
		}
	}) {
		return nil
	}
	// Work still queued finds the device closed and does nothing; a stream
	// a test holds keeps Close waiting until it is released.
	for _, s := range streams {
		_ = s.end() // its errors are driver.ErrClosed
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	openDrivers.Add(-1)
	var err error
	if len(d.segs) > 0 {
		err = prefixed.Errorf("host", "closed with %s not freed", units.Count(len(d.segs), "allocation"))
	}
	d.segs = nil
	err = errors.Join(err, d.closeVM())
	d.used = 0
	return err
}

// Used returns the bytes allocated from the device: by Alloc, and by
// Create where pages are mapped.
func (d *Driver) Used() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used
}

var _ driver.HostAddressable = (*Driver)(nil)

// HostBytes implements driver.HostAddressable: the host device's memory is
// the program's own.
func (d *Driver) HostBytes(ptr uintptr, n int64) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, driver.ErrClosed
	}
	return d.resolve(ptr, n)
}
