// Package hosttest is the host driver as this project's tests drive it: a
// wrapper around a *host.Driver, apart from the real one (as go-nvml's mock
// is apart from its binding), that fails chosen operations on demand
// ([Driver.FailNth], [Driver.FailWhen]) and reaches the host driver's test
// controls ([Driver.Hold], [Driver.Enqueue], [Driver.Used],
// [Driver.Handles]). Open a device on it with gpu's test-only OpenDriver.
package hosttest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gpuscope/gpuscope/gpu/host"
	"github.com/gpuscope/gpuscope/internal/hostctl"
)

// ErrInjected is the error of an injected failure.
var ErrInjected = errors.New("hosttest: injected failure")

// Op names an operation for fault injection.
type Op int

// The operations that can be made to fail: every driver call the pool makes.
const (
	OpAlloc   Op = iota // Alloc, and Create (a handle)
	OpFree              // Free, and Release (a handle)
	OpCopy              // any copy or memset
	OpReserve           // ReserveAddress and ReleaseAddress
	OpMap               // Map
	OpAccess            // SetAccess
	OpUnmap             // Unmap
	OpEvent             // RecordEvent and WaitEvent
	numOps
)

// Ops lists every Op, for tests that try each.
var Ops = [...]Op{OpAlloc, OpFree, OpCopy, OpReserve, OpMap, OpAccess, OpUnmap, OpEvent}

func (o Op) String() string {
	return [...]string{"alloc", "free", "copy", "reserve", "map", "access", "unmap", "event"}[o]
}

// Driver is a host driver whose operations can be made to fail. The
// embedded *host.Driver does the work; Driver's own methods decide first
// whether the call fails. It is safe for concurrent use.
type Driver struct {
	*host.Driver

	mu       sync.Mutex  // protects the fields below
	counts   [numOps]int // operations of each Op so far
	injected int         // failures injected so far
	failNth  [numOps]int // fail the Nth (1-based) operation of each Op; 0: never
	failWhen func(op Op, size int64) bool
}

// New returns a host driver of capacity bytes that fails nothing until told.
func New(capacity int64) (*Driver, error) {
	h, err := host.New(capacity)
	if err != nil {
		return nil, err
	}
	return &Driver{Driver: h}, nil
}

// FailNth makes the nth operation of kind op from now on fail with
// ErrInjected (n = 1: the next one); n = 0 clears it.
func (d *Driver) FailNth(op Op, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts[op] = 0
	d.failNth[op] = n
}

// FailWhen makes every operation for which fail returns true fail with
// ErrInjected; nil clears it. fail is called with the wrapper's lock held
// and must not call the driver.
func (d *Driver) FailWhen(fail func(op Op, size int64) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failWhen = fail
}

// Injected returns how many failures FailNth and FailWhen have injected.
func (d *Driver) Injected() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.injected
}

// inject counts an operation of kind op on size bytes and returns the
// injected failure, if one is due.
func (d *Driver) inject(op Op, size int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts[op]++
	if d.failNth[op] == d.counts[op] || d.failWhen != nil && d.failWhen(op, size) {
		d.injected++
		return fmt.Errorf("%w: %v of %d bytes", ErrInjected, op, size)
	}
	return nil
}

// failOr returns the injected failure of an operation of kind op on size
// bytes, if one is due, and else what the real driver's call returns.
func (d *Driver) failOr(op Op, size int64, call func() error) error {
	if err := d.inject(op, size); err != nil {
		return err
	}
	return call()
}

// failOr is Driver.failOr for a call that returns a value too.
func failOr[T any](d *Driver, op Op, size int64, call func() (T, error)) (T, error) {
	if err := d.inject(op, size); err != nil {
		var zero T
		return zero, err
	}
	return call()
}

// Hold keeps stream busy: work queued on it after Hold, and events recorded
// on it, wait until release is called. It is a test's stand-in for a long
// kernel. release may be called more than once. Holding the default stream
// is refused: its work never waits.
func (d *Driver) Hold(stream uintptr) (release func(), err error) {
	return hostctl.Hold(d.Driver, stream)
}

// Enqueue queues fn on stream, after the work queued there, and returns at
// once. On the default stream fn runs before Enqueue returns. An error fn
// returns is reported by the stream's next Synchronize.
func (d *Driver) Enqueue(stream uintptr, fn func() error) error {
	return hostctl.Enqueue(d.Driver, stream, fn)
}

// Used returns the bytes allocated from the device.
func (d *Driver) Used() int64 { return hostctl.Used(d.Driver) }

// Handles counts what the driver holds besides device memory: streams (the
// default one aside), events, and page-locked allocations.
func (d *Driver) Handles() (streams, events, pinned int) { return hostctl.Handles(d.Driver) }

// Alloc fails as OpAlloc, else allocates.
func (d *Driver) Alloc(size int64) (uintptr, error) {
	return failOr(d, OpAlloc, size, func() (uintptr, error) { return d.Driver.Alloc(size) })
}

// Free fails as OpFree, else frees.
func (d *Driver) Free(ptr uintptr, size int64) error {
	return d.failOr(OpFree, size, func() error { return d.Driver.Free(ptr, size) })
}

// CopyHtoD fails as OpCopy, else copies.
func (d *Driver) CopyHtoD(dst uintptr, src []byte, stream uintptr) error {
	return d.failOr(OpCopy, int64(len(src)), func() error { return d.Driver.CopyHtoD(dst, src, stream) })
}

// CopyDtoH fails as OpCopy, else copies.
func (d *Driver) CopyDtoH(dst []byte, src uintptr, stream uintptr) error {
	return d.failOr(OpCopy, int64(len(dst)), func() error { return d.Driver.CopyDtoH(dst, src, stream) })
}

// CopyDtoD fails as OpCopy, else copies.
func (d *Driver) CopyDtoD(dst, src uintptr, n int64, stream uintptr) error {
	return d.failOr(OpCopy, n, func() error { return d.Driver.CopyDtoD(dst, src, n, stream) })
}

// Memset fails as OpCopy, else sets.
func (d *Driver) Memset(dst uintptr, v byte, n int64, stream uintptr) error {
	return d.failOr(OpCopy, n, func() error { return d.Driver.Memset(dst, v, n, stream) })
}

// RecordEvent fails as OpEvent, else records.
func (d *Driver) RecordEvent(stream uintptr) (uintptr, error) {
	return failOr(d, OpEvent, 0, func() (uintptr, error) { return d.Driver.RecordEvent(stream) })
}

// WaitEvent fails as OpEvent, else waits.
func (d *Driver) WaitEvent(ev uintptr) error {
	return d.failOr(OpEvent, 0, func() error { return d.Driver.WaitEvent(ev) })
}
