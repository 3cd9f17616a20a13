package gputest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/internal/host"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// ErrInjected is the error of every fault [Faults] injects:
// errors.Is(err, ErrInjected) tells an injected failure from a real one.
// The message of the error says which driver call failed and which rule
// made it fail.
var ErrInjected = prefixed.New("gputest", "injected fault")

// Op is a kind of call that [Faults] can make fail: a driver call, each
// naming the methods of package gpu/driver's interfaces it covers, or
// (OpRequest) an allocation a scope asks for.
type Op int

// The kinds of calls. Name, MemInfo, Granularity and HostBytes never fail.
//
// OpAlloc counts the driver's calls, which the pool makes only when it
// takes more memory: a warm pool serves an allocation from its cache with
// no call, so FailNth(OpAlloc, n) may not fire until EmptyCache. To fail
// the nth allocation the program asks for, cached or not, use OpRequest.
const (
	OpAlloc   Op = iota + 1 // memory taken from the driver: Alloc, Create (a page the pool grows by), HostAlloc
	OpFree                  // memory given back: Free, Release, HostFree
	OpCopy                  // CopyHtoD, CopyDtoH, CopyDtoD, Memset, CopyHtoDAsync, CopyDtoHAsync
	OpStream                // NewStream, Synchronize, DestroyStream
	OpEvent                 // RecordEvent, EventDone, WaitEvent, DestroyEvent
	OpReserve               // address space for growth: ReserveAddress, ReleaseAddress
	OpMap                   // Map, a page into reserved address space
	OpAccess                // SetAccess, which makes mapped pages usable
	OpUnmap                 // Unmap
	// OpRequest is an allocation a scope asks for, before the pool sees
	// it: Scope.Alloc (and gpu.Alloc), gpu.AllocHost, and a scope's
	// gpu.Reserve (its Call's Method says which). Its injected failure is
	// out of memory: errors.Is matches gpu.ErrOutOfMemory and
	// ErrInjected. A scope that waits for memory (gpu.WaitForMemory)
	// fails at once, and nothing is evicted for it.
	OpRequest
	lastOp = OpRequest
)

var opNames = [...]string{OpAlloc: "alloc", OpFree: "free", OpCopy: "copy", OpStream: "stream",
	OpEvent: "event", OpReserve: "reserve", OpMap: "map", OpAccess: "access", OpUnmap: "unmap", OpRequest: "request"}

// String returns the op's name, such as "alloc".
func (o Op) String() string {
	if o < OpAlloc || o > lastOp {
		return fmt.Sprintf("Op(%d)", int(o))
	}
	return opNames[o]
}

// Call is a driver call, or an allocation a scope asks for (OpRequest),
// as the function given to [Faults.FailWhen] sees it.
type Call struct {
	Op     Op
	Method string // the driver's method, such as "Alloc" or "Create"; for OpRequest "Alloc", "AllocHost" or "Reserve"
	Size   int64  // the bytes it concerns; 0 where it does not say (streams, events, Release, HostFree)
	N      int    // its number among the device's calls of its Op, from 1
}

// Faults controls the device [OpenFaulty] opened: which of its driver calls
// and of its scopes' allocations fail, and which of its streams are held
// busy. A call fails when [Faults.FailNth] or [Faults.FailWhen] says so,
// before it reaches the driver (an allocation: the pool): an injected
// failure changes nothing on the device, so the caller may retry it. Its
// methods are safe for concurrent use.
type Faults struct {
	drv *faultDriver
}

// OpenFaulty opens a host-memory device of capacity bytes
// (gpu.DefaultHostMemory if 0), named "host:N" as gpu.OpenHost's is, and
// returns it with its Faults: a test's way to see what a program does
// when the GPU misbehaves (out of memory at the worst moment, a copy or an
// event that fails, a kernel that runs long). opts are gpu.OpenHost's but
// for gpu.HostMemory, which capacity replaces. Close the device as any
// other; the Faults act on it until then.
func OpenFaulty(capacity int64, opts ...gpu.DeviceOption) (*gpu.Device, *Faults, error) {
	if capacity == 0 {
		capacity = gpu.DefaultHostMemory
	}
	if capacity < host.PageSize {
		return nil, nil, fmt.Errorf("gputest: OpenFaulty(%d): the capacity is at least %s, the host device's page",
			capacity, gpu.Bytes(host.PageSize))
	}
	h, err := host.New(capacity)
	if err != nil {
		return nil, nil, prefixed.Wrap("gputest", err, "OpenFaulty")
	}
	drv := &faultDriver{Driver: h, failNth: map[Op]int{}}
	dev, err := gpu.OpenDriver(drv, "host", opts...)
	if err != nil {
		return nil, nil, err
	}
	return dev, &Faults{drv: drv}, nil
}

// FailNth makes the nth call of kind op from now on fail with ErrInjected
// (n = 1: the next one), once; n = 0 clears it. It panics for an op that
// is not one of the Op constants or a negative n.
func (f *Faults) FailNth(op Op, n int) {
	if op < OpAlloc || op > lastOp || n < 0 {
		panic(fmt.Sprintf("gputest: FailNth(%v, %d): not an Op, or a negative count", op, n))
	}
	d := f.drv
	d.mu.Lock()
	defer d.mu.Unlock()
	if n == 0 {
		delete(d.failNth, op)
		return
	}
	d.failNth[op] = d.counts[op] + n
}

// FailWhen makes every driver call for which fail returns true fail with
// ErrInjected; nil clears it. fail is called for each call, one at a time,
// with the Faults locked: it must not call the Faults' or the device's
// methods.
func (f *Faults) FailWhen(fail func(Call) bool) {
	d := f.drv
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failWhen = fail
}

// Injected returns how many calls FailNth and FailWhen have made fail.
func (f *Faults) Injected() int {
	d := f.drv
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.injected
}

// Hold keeps st busy, as a long kernel would: work queued on it after
// Hold, and events recorded on it, wait until release is called. release
// may be called more than once; the device's Close waits for it. st must
// be a live stream of the Faults' device: another device's, or one whose
// scope ended, is refused, as is the default stream (a nil st), whose
// work never waits.
func (f *Faults) Hold(st *gpu.Stream) (release func(), err error) {
	if st.ID() == 0 {
		return nil, errors.New("gputest: Hold: the default stream never waits")
	}
	release, err = f.drv.Driver.Hold(st.ID())
	if err != nil {
		// The host driver numbers its streams apart from every other's: one
		// it does not know is another device's, or has ended.
		return nil, prefixed.Wrap("gputest", err, "Hold: not a live stream of this device")
	}
	return release, nil
}

// Enqueue queues fn on st, after the work queued there, and returns at
// once: work of the test's own, such as a kernel that writes a buffer. On
// the default stream (a nil st) fn runs before Enqueue returns. An error
// fn returns is reported by the stream's next Synchronize.
func (f *Faults) Enqueue(st *gpu.Stream, fn func() error) error {
	if fn == nil {
		return errors.New("gputest: Enqueue: nil function")
	}
	if err := f.drv.Driver.Enqueue(st.ID(), fn); err != nil {
		return prefixed.Wrap("gputest", err, "Enqueue")
	}
	return nil
}

// Used returns the bytes the device's driver has allocated: what the
// device's pool reserved, and any memory taken from the driver directly.
func (f *Faults) Used() int64 { return f.drv.Driver.Used() }

// Handles counts what the device's driver holds besides device memory:
// streams (the default one aside), events, and page-locked allocations.
// A test checks with it that nothing was left behind.
func (f *Faults) Handles() (streams, events, pinned int) { return f.drv.Driver.Handles() }

// faultDriver is the host driver, whose calls fail first when the Faults
// say so. The embedded driver does the work.
type faultDriver struct {
	*host.Driver

	mu       sync.Mutex // protects the fields below
	counts   [lastOp + 1]int
	failNth  map[Op]int // the count of its op at which a call fails
	failWhen func(Call) bool
	injected int
}

// inject counts a call and returns its injected failure, if one is due.
func (d *faultDriver) inject(op Op, method string, size int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts[op]++
	c := Call{Op: op, Method: method, Size: size, N: d.counts[op]}
	var rule string
	switch {
	case d.failNth[op] == c.N:
		delete(d.failNth, op)
		rule = "FailNth"
	case d.failWhen != nil && d.failWhen(c):
		rule = "FailWhen"
	default:
		return nil
	}
	d.injected++
	what := method
	if size > 0 {
		what += " of " + gpu.Bytes(size).String()
	}
	if op == OpRequest {
		return prefixed.Kind("gputest", ErrInjected, "%s, request %d, by %s", what, c.N, rule)
	}
	return prefixed.Kind("gputest", ErrInjected, "%s, %v call %d, by %s", what, op, c.N, rule)
}

// InjectRequest is what package gpu asks before it serves an allocation a
// scope asks for: the failure FailNth or FailWhen injects (OpRequest), if
// one is due; gpu returns it as out of memory.
func (d *faultDriver) InjectRequest(method string, size int64) error {
	return d.inject(OpRequest, method, size)
}

// failOr returns the injected failure of a call, if one is due, and else
// what the driver's call returns.
func (d *faultDriver) failOr(op Op, method string, size int64, call func() error) error {
	if err := d.inject(op, method, size); err != nil {
		return err
	}
	return call()
}

// failOr is faultDriver.failOr for a call that returns a value too.
func failOr[T any](d *faultDriver, op Op, method string, size int64, call func() (T, error)) (T, error) {
	if err := d.inject(op, method, size); err != nil {
		var zero T
		return zero, err
	}
	return call()
}
