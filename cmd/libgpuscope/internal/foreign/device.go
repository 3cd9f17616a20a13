package foreign

import (
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/extcache"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// MaxDevices bounds the device indexes a call may name.
const MaxDevices = 64

// RootName is the name of each device's root scope: what libraries
// allocate while no scope of theirs is open belongs to it.
const RootName = "libgpuscope"

// device is a device as C callers see it: the gpu.Device, its root scope
// and the scopes begun on it. Which scope a call allocates in is the
// caller's to say (clib keeps a stack of them per thread): none is
// current for the process.
type device struct {
	index   int
	gpu     *gpu.Device
	root    *record
	lastEnd atomic.Pointer[string] // what the last End found still live
	held    atomic.Bool            // the pair cache is kept off: a recording runs (holdPairs)
	pairs   atomic.Bool            // the pair cache is on (paircache.go)

	pairsWanted bool                 // GPUSCOPE_PAIR_CACHE did not turn the pair cache off as the device opened
	allocMu     sync.Mutex           // serializes allocations while the pair cache is on (device.allocIn), and protects listed
	listed      [PairCacheOut]Cached // makeRoom's list of what the pair cache holds

	mu     sync.Mutex // serializes Begin and End on the device, and protects opened
	opened []*record  // the scopes begun on it and not ended, in the order begun
}

var devices struct {
	mu     sync.Mutex // protects failed, and opening
	open   [MaxDevices]atomic.Pointer[device]
	failed [MaxDevices]error // why device i could not be opened, once it could not
}

// openDevice opens device i: GPU i in a build with -tags cuda, else the
// host device as device 0, of GPUSCOPE_HOST_MEMORY bytes where that is set.
func openDevice(i int) (*gpu.Device, error) {
	if gpu.CUDA {
		return gpu.Open(i)
	}
	if i != 0 {
		return nil, prefixed.Kind("gpu", gpu.ErrNoDevice, "device %d: built without -tags cuda, the library serves the host device, device 0, only", i)
	}
	opts := []gpu.DeviceOption{}
	if s := os.Getenv("GPUSCOPE_HOST_MEMORY"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, prefixed.Errorf("gpu", "GPUSCOPE_HOST_MEMORY=%q: not a number of bytes", s)
		}
		opts = append(opts, gpu.HostMemory(n))
	}
	return gpu.OpenHost(opts...)
}

// deviceAt returns device i, opening it on first use. Many threads may ask
// at once; one opens it. A device that failed to open fails the same way
// from then on.
func deviceAt(i int) (*device, error) {
	if i < 0 || i >= MaxDevices {
		return nil, prefixed.Kind("gpu", gpu.ErrNoDevice, "device %d does not exist", i)
	}
	if d := devices.open[i].Load(); d != nil {
		return d, nil
	}
	devices.mu.Lock()
	defer devices.mu.Unlock()
	if d := devices.open[i].Load(); d != nil {
		return d, nil
	}
	if err := devices.failed[i]; err != nil {
		return nil, err
	}
	g, err := openDevice(i)
	if err == nil {
		var d *device
		if d, err = adopt(i, g); err == nil {
			return d, nil
		}
	}
	devices.failed[i] = err
	return nil, err
}

// adopt makes g, just opened, device i, with its root scope. Called with
// devices.mu held; where it fails, g is closed.
func adopt(i int, g *gpu.Device) (*device, error) {
	d := &device{index: i, gpu: g, pairsWanted: pairsWanted()}
	var err error
	if d.root, err = openRecord(d, nil, RootName); err != nil {
		return nil, errors.Join(err, g.Close())
	}
	if pc := cache(); pc != nil {
		pc.Reset(i) // a device opened before and shut down
		d.pairsOn()
	}
	extcache.Attach(g, &extcache.Cache{Flush: func() bool { return flushPairs(i) }, Hold: d.holdPairs})
	devices.open[i].Store(d)
	return d, nil
}

// Adopt makes g device i, where it is not open: for tests that need a
// device of their own making (one on a simulated driver). Shutdown closes
// it.
func Adopt(i int, g *gpu.Device) error {
	if i < 0 || i >= MaxDevices {
		return prefixed.Kind("gpu", gpu.ErrNoDevice, "device %d does not exist", i)
	}
	devices.mu.Lock()
	defer devices.mu.Unlock()
	if devices.open[i].Load() != nil {
		return prefixed.Errorf("gpu", "device %d is open already", i)
	}
	_, err := adopt(i, g)
	return err
}

// openDeviceAt returns device i if it is open, without opening it.
func openDeviceAt(i int) *device {
	if i < 0 || i >= MaxDevices {
		return nil
	}
	return devices.open[i].Load()
}

// Shutdown ends every scope begun from C, frees what libraries still hold
// and closes the devices this package opened, for tests and for a program
// that is done with the C allocator. Pointers libraries still hold are
// invalid after it. Later calls open the devices again.
func Shutdown() error {
	var errs []error
	for i := range devices.open {
		d := devices.open[i].Load()
		if d == nil {
			continue
		}
		d.mu.Lock()
		d.pairsOff()
		for k := len(d.opened) - 1; k >= 0; k-- { // each after the scopes begun inside it
			errs = append(errs, d.opened[k].endLocked(true))
		}
		d.opened = nil
		errs = append(errs, d.root.endLocked(true))
		if pc := cache(); pc != nil {
			pc.Reset(i)
		}
		devices.open[i].Store(nil)
		d.mu.Unlock()
		errs = append(errs, d.gpu.Close())
	}
	devices.mu.Lock()
	clear(devices.failed[:])
	devices.mu.Unlock()
	return errors.Join(errs...)
}

// ErrEnded is what a call fails with where the scope it names, one that
// clib keeps for the calling thread or a stream, has ended: clib forgets
// it and asks again with the enclosing one. It never reaches a caller of
// the library.
var ErrEnded = errors.New("foreign: the scope has ended")

// scopeOf returns the scope id on d (0: its root): ErrEnded where it has
// ended, or begun to.
func (d *device) scopeOf(id int64) (*record, error) {
	if id == 0 {
		return d.root, nil
	}
	r := lookup(id)
	if r == nil || r.ending.Load() {
		return nil, ErrEnded
	}
	if r.dev != d {
		return nil, prefixed.Kind("gpu", gpu.ErrWrongScope, "scope %d is a scope of device %d, not of device %d", id, r.dev.index, d.index)
	}
	return r, nil
}
