package gpu

import (
	"errors"
	"strings"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/gpu/internal/host"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/registry"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// DefaultHostMemory is the capacity of a host device opened without
// [HostMemory].
const DefaultHostMemory = 1 << 30

// Device is one device with its caching pool and its scopes. Its methods
// are safe for concurrent use.
type Device struct {
	drv           driver.Driver
	pool          *pool.Pool
	tree          *scope.Tree
	name          string
	releaseErrors func(error) // OnReleaseError, or nil
	onOOM         func(error) // OnOutOfMemory, or nil
	waiters       waitQueue   // allocations of WaitForMemory scopes waiting for memory
	host          hostCache   // page-locked host memory for reuse (AllocHost)
	evict         evictor     // its Evictable scopes
	sleep         sleepers    // its Sleepable scopes
	left          leftovers   // events and streams a release failed to destroy, for EmptyCache and Close
	recording     atomic.Pointer[Recording]
	closed        atomic.Bool
	registered    *registry.Device // this device in the process's registry, for gputest
	inject        requestInjector  // the driver, where it fails scopes' allocations (gputest); else nil
}

// OpenHost opens a device whose memory is host RAM, with the capacity given
// by [HostMemory] (default DefaultHostMemory). It needs no GPU. Its name
// is "host:N", N the lowest number no open host device has: "host:0" for
// the first.
func OpenHost(opts ...DeviceOption) (*Device, error) {
	o, err := buildDeviceOptions(opts)
	if err != nil {
		return nil, err
	}
	return openHost(o)
}

// OpenDefault opens the device a program runs on where it does not choose
// one: GPU 0 where this build has CUDA support ([CUDA], -tags cuda) and
// the machine a GPU, as [Open](0) opens it, and otherwise a host-memory
// device, as [OpenHost] opens one. What decides is Open(0): where it fails
// with ErrNoDevice, the host device opens; any other error is returned, so
// that a GPU that is there but fails is never hidden. [Device.Name] says
// which opened ("cuda:0", or "host:N"). The options apply to whichever
// opens, but [HostMemory], which sizes the host device and means nothing
// to a GPU. A binary built with -tags cuda never reaches the fallback on
// a machine without the CUDA driver or a GPU: gorgonia.org/cu, which that
// build links, initializes CUDA as the program starts and exits where it
// cannot. A program meant to run on either machine ships the default
// build there.
func OpenDefault(opts ...DeviceOption) (*Device, error) {
	o, err := buildDeviceOptions(opts)
	if err != nil {
		return nil, err
	}
	gpuOpts := o
	gpuOpts.hostMemory = 0
	dev, err := openGPU(0, gpuOpts)
	if !errors.Is(err, ErrNoDevice) {
		return dev, err
	}
	return openHost(o)
}

// openHost is OpenHost with its options built.
func openHost(o deviceOptions) (*Device, error) {
	if o.hostMemory == 0 {
		o.hostMemory = DefaultHostMemory
	}
	drv, err := host.New(o.hostMemory)
	if err != nil {
		return nil, deviceError(err)
	}
	return newDevice(drv, "host", o)
}

// OpenDriver opens a device over drv, a driver of the caller's own (package
// gpu/driver says what one implements): a fake that a test controls, such
// as gputest.OpenFaulty's, or a device gpuscope has no driver for. name is
// the device's name in errors, snapshots and gputest.Devices: kept as
// given where it ends in ":" and a number ("cuda:0": the hardware's
// number, which two devices over one GPU share), and otherwise a kind, to
// which the device adds ":N", the lowest number no open device of that
// kind has ("fake" opens "fake:0", then "fake:1"), so that devices of a
// kind have distinct names. The device owns drv: its Close closes drv, and so
// does a failed OpenDriver. [HostMemory] means nothing to it and is an
// error.
func OpenDriver(drv driver.Driver, name string, opts ...DeviceOption) (*Device, error) {
	if drv == nil {
		return nil, prefixed.Kind("gpu", ErrNoDevice, "OpenDriver(nil)")
	}
	o, err := buildDeviceOptions(opts)
	if err == nil && o.hostMemory != 0 {
		err = prefixed.Errorf("gpu", "HostMemory is for OpenHost; OpenDriver's device has the memory its driver has")
	}
	if err != nil {
		return nil, deviceError(errors.Join(err, drv.Close()))
	}
	return newDevice(drv, name, o)
}

func newDevice(drv driver.Driver, name string, o deviceOptions) (*Device, error) {
	p, err := pool.New(drv, o.pool...)
	if err != nil {
		return nil, deviceError(errors.Join(err, drv.Close()))
	}
	name = registry.Claim(name) // "host" becomes "host:0", or the next number no open device has
	d := &Device{drv: drv, pool: p, name: name, releaseErrors: o.releaseErrors, onOOM: o.onOOM}
	d.inject, _ = drv.(requestInjector)
	d.host.init(d)
	to := scope.TreeOptions{OnRelease: d.waiters.released, Evicted: ErrEvicted}
	if o.scrub {
		to.Scrub = func(ptr uintptr, n int64, stream uintptr) error { return drv.Memset(ptr, 0, n, stream) }
		d.sleep.scrubs = true
	}
	d.tree = scope.NewTree(p, name, to)
	register(d)
	return d, nil
}

// valid reports whether d is a device this package opened: not nil, not a
// zero Device. The methods of one that is not return errors or zero values
// (each says which); none panics.
func (d *Device) valid() bool { return d != nil && d.pool != nil }

// errNilDevice is what the methods of a nil or zero *Device return.
var errNilDevice = prefixed.Kind("gpu", ErrNoDevice, "nil or zero Device (use Open or OpenHost)")

// dropped hands an error no caller can receive to the device's
// OnReleaseError, or keeps it for gputest.
func (d *Device) dropped(err error) {
	err = deviceError(err)
	if d.releaseErrors != nil {
		d.releaseErrors(err)
		return
	}
	registry.RecordDroppedError(d.name, err)
}

// Name returns the device's name, such as "host:0" or "cuda:0"; "" for a
// nil or zero Device. No two open devices have the same name.
func (d *Device) Name() string {
	if !d.valid() {
		return ""
	}
	return d.name
}

// String describes the device: its name, then what its driver says of it,
// such as "cuda:0 (NVIDIA H200)" or "host:0 (host memory, 2.00 GiB)".
func (d *Device) String() string {
	if !d.valid() {
		return "gpu.Device(nil)"
	}
	return d.name + " (" + d.drv.Name() + ")"
}

// Driver returns the device's driver, for a driver's own calls that the
// package does not make (cuda.Driver's stream-ordered allocator, peer
// access); nil for a nil or zero Device. Memory allocated through it
// belongs to no scope, and no snapshot shows it.
func (d *Device) Driver() driver.Driver {
	if !d.valid() {
		return nil
	}
	return d.drv
}

// usable returns why d cannot serve a call, if it cannot: a nil or zero
// Device, or one that was closed.
func (d *Device) usable() error {
	if !d.valid() {
		return errNilDevice
	}
	if d.closed.Load() {
		return ErrDeviceClosed
	}
	return nil
}

// EmptyCache returns cached, unused memory to the driver: the pool's, and
// the page-locked host memory of ended HostSlices (that which copies
// still use goes back once they have completed, when the device next
// looks: an AllocHost, EmptyCache, Close). Live buffers are untouched.
func (d *Device) EmptyCache() error {
	if err := d.usable(); err != nil {
		return err
	}
	d.flushExternal()
	_, err := d.host.release()
	_, serr := d.sleep.emptyCaches(nil)
	err = errors.Join(d.pool.EmptyCache(), serr, err, d.left.retry(d))
	d.waiters.released() // the room it made is for the allocations waiting too
	return deviceError(err)
}

// SetMaxReserved caps, while the program runs, the bytes the device's pool
// reserves from the driver (PyTorch's set_per_process_memory_fraction, CuPy's
// set_limit); 0 removes the cap. A cap below what is reserved gives back at
// once what is cached and makes later allocations that would need more
// memory fail with ErrOutOfMemory; live buffers are never touched. A
// negative cap fails with ErrInvalidSize and changes nothing. See
// [pool.Pool.SetMaxReserved]. The pools of [Sleepable] scopes take the cap
// as the device's pool does, and so cut their handles as it does; one
// asleep takes it as it wakes.
func (d *Device) SetMaxReserved(bytes int64) error {
	if err := d.usable(); err != nil {
		return err
	}
	d.flushExternal() // a lower cap gives back what is cached: this too
	return d.capSet(d.pool.SetMaxReserved(bytes))
}

// SetMaxReservedFraction is [Device.SetMaxReserved] with the cap given as a
// fraction in (0, 1] of the device's memory.
func (d *Device) SetMaxReservedFraction(f float64) error {
	if err := d.usable(); err != nil {
		return err
	}
	if !(f > 0 && f <= 1) {
		return prefixed.Kind("gpu", ErrInvalidSize, "SetMaxReservedFraction(%v): a fraction of the device must be in (0, 1]", f)
	}
	d.flushExternal()
	return d.capSet(d.pool.SetMaxReservedFraction(f))
}

// capSet is the rest of SetMaxReserved and SetMaxReservedFraction once the
// device's pool answered err: the Sleepable scopes' pools follow the cap,
// and where the device reserves more than it, they give back what they
// cache, as the device's pool has (their pages count in its Reserved, not
// in their own, so that their own cap alone often gives back nothing). A
// cap the pool refused (ErrInvalidSize: negative, below one page) changed
// nothing, and nothing else changes.
func (d *Device) capSet(err error) error {
	if errors.Is(err, ErrInvalidSize) {
		return deviceError(err)
	}
	d.sleep.capChanged()
	if c := d.pool.MaxReserved(); c > 0 && d.pool.Stats().Reserved > c {
		_, serr := d.sleep.emptyCaches(nil)
		err = errors.Join(err, serr)
	}
	d.waiters.released() // a higher cap, or none, is room for allocations waiting
	return deviceError(err)
}

// MaxReserved returns the cap on the bytes the device's pool reserves; 0
// means none.
func (d *Device) MaxReserved() int64 {
	if !d.valid() {
		return 0
	}
	return d.pool.MaxReserved()
}

// MemInfo reports the device's free and total bytes, as its driver sees them.
func (d *Device) MemInfo() (free, total int64, err error) {
	if !d.valid() {
		return 0, 0, errNilDevice
	}
	free, total, err = d.drv.MemInfo()
	return free, total, deviceError(err)
}

// Close closes every scope still open (releasing its memory), returns the
// pool's cache and the page-locked host memory to the driver (waiting for
// copies still queued on it) and closes the driver. Scopes left open are
// reported in the error, by path. Close is idempotent.
func (d *Device) Close() error {
	if !d.valid() {
		return errNilDevice
	}
	d.flushExternal() // what a library freed is no memory a scope left open
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	defer unregister(d)
	if open := scopeSnapshots(d); len(open) > 0 {
		registry.RecordForcedClose(d.name, open)
	}
	leftOpen, err := d.tree.Close()
	if len(leftOpen) > 0 {
		err = errors.Join(prefixed.Errorf("gpu", "device %s closed with %s open: %s",
			d.name, units.Count(len(leftOpen), "scope"), strings.Join(leftOpen, ", ")), err)
	}
	err = errors.Join(err, d.host.close(), d.pool.Close())
	return deviceError(errors.Join(err, d.left.retry(d), d.drv.Close()))
}
