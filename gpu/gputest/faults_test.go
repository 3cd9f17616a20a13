package gputest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// openFaulty opens a faulty device of 64 MiB, closed when the test ends.
func openFaulty(t *testing.T, opts ...gpu.DeviceOption) (*gpu.Device, *gputest.Faults) {
	t.Helper()
	dev, faults, err := gputest.OpenFaulty(64<<20, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return dev, faults
}

func TestFaultsFailTheCallsTheyAreToldTo(t *testing.T) {
	dev, faults := openFaulty(t)
	d := dev.Driver()
	faults.FailNth(gputest.OpAlloc, 2)
	a, err := d.Alloc(64)
	require.NoError(t, err)
	_, err = d.Alloc(64)
	assert.ErrorIs(t, err, gputest.ErrInjected, "the second allocation fails")
	b, err := d.Alloc(64)
	require.NoError(t, err, "and only that one")
	faults.FailWhen(func(c gputest.Call) bool { return c.Op == gputest.OpCopy && c.Size == 3 })
	assert.ErrorIs(t, d.CopyHtoD(a, []byte{1, 2, 3}, 0), gputest.ErrInjected)
	assert.NoError(t, d.CopyHtoD(a, []byte{1, 2}, 0))
	faults.FailWhen(nil)
	faults.FailNth(gputest.OpFree, 1)
	assert.ErrorIs(t, d.Free(a, 64), gputest.ErrInjected)
	require.NoError(t, d.Free(a, 64), "an injected failure loses nothing")
	require.NoError(t, d.Free(b, 64))
	assert.False(t, errors.Is(err, driver.ErrClosed))
	assert.Equal(t, 3, faults.Injected())
	assert.Zero(t, faults.Used())
}

func TestAnInjectedFaultSaysWhichCallFailedAndWhy(t *testing.T) {
	dev, faults := openFaulty(t)
	d := dev.Driver()
	faults.FailNth(gputest.OpAlloc, 1)
	_, err := d.Alloc(1536)
	assert.EqualError(t, err, "gputest: injected fault: Alloc of 1.50 KiB, alloc call 1, by FailNth")
	faults.FailWhen(func(c gputest.Call) bool { return c.Method == "NewStream" })
	_, err = d.NewStream()
	assert.EqualError(t, err, "gputest: injected fault: NewStream, stream call 1, by FailWhen")
}

func TestFailWhenSeesEachCallNumberedWithinItsOp(t *testing.T) {
	dev, faults := openFaulty(t)
	d := dev.Driver()
	var seen []gputest.Call
	faults.FailWhen(func(c gputest.Call) bool { seen = append(seen, c); return false })
	a, err := d.Alloc(512)
	require.NoError(t, err)
	require.NoError(t, d.Memset(a, 1, 100, 0))
	b, err := d.Alloc(1024)
	require.NoError(t, err)
	require.NoError(t, d.Free(a, 512))
	require.NoError(t, d.Free(b, 1024))
	assert.Equal(t, []gputest.Call{
		{Op: gputest.OpAlloc, Method: "Alloc", Size: 512, N: 1},
		{Op: gputest.OpCopy, Method: "Memset", Size: 100, N: 1},
		{Op: gputest.OpAlloc, Method: "Alloc", Size: 1024, N: 2},
		{Op: gputest.OpFree, Method: "Free", Size: 512, N: 1},
		{Op: gputest.OpFree, Method: "Free", Size: 1024, N: 2},
	}, seen)
}

// neverFail are the driver methods no Op covers, as the Op constants say.
var neverFail = map[string]bool{"Name": true, "MemInfo": true, "Granularity": true, "HostBytes": true, "Close": true}

// opOf is which Op covers each driver method, as the Op constants say.
var opOf = map[string]gputest.Op{
	"Alloc": gputest.OpAlloc, "Create": gputest.OpAlloc, "HostAlloc": gputest.OpAlloc,
	"Free": gputest.OpFree, "Release": gputest.OpFree, "HostFree": gputest.OpFree,
	"CopyHtoD": gputest.OpCopy, "CopyDtoH": gputest.OpCopy, "CopyDtoD": gputest.OpCopy, "Memset": gputest.OpCopy,
	"CopyHtoDAsync": gputest.OpCopy, "CopyDtoHAsync": gputest.OpCopy,
	"NewStream": gputest.OpStream, "Synchronize": gputest.OpStream, "DestroyStream": gputest.OpStream,
	"RecordEvent": gputest.OpEvent, "EventDone": gputest.OpEvent, "WaitEvent": gputest.OpEvent, "DestroyEvent": gputest.OpEvent,
	"ReserveAddress": gputest.OpReserve, "ReleaseAddress": gputest.OpReserve,
	"Map": gputest.OpMap, "SetAccess": gputest.OpAccess, "Unmap": gputest.OpUnmap,
}

// driverMethods lists the methods of the driver interfaces the faulty
// device implements: every call the device's pool and scopes can make.
func driverMethods(t *testing.T, d driver.Driver) []reflect.Method {
	t.Helper()
	ifaces := []reflect.Type{reflect.TypeFor[driver.Driver](), reflect.TypeFor[driver.HostAllocator](), reflect.TypeFor[driver.HostAddressable]()}
	if runtime.GOOS == "linux" {
		ifaces = append(ifaces, reflect.TypeFor[driver.PageMapper]())
	}
	var out []reflect.Method
	for _, it := range ifaces {
		require.True(t, reflect.TypeOf(d).Implements(it), "the faulty device is a %v", it)
		for i := range it.NumMethod() {
			out = append(out, it.Method(i))
		}
	}
	return out
}

// callWithZeros calls d's method of that name with zero arguments: the
// fault, if one is due, comes before the driver looks at them.
func callWithZeros(d driver.Driver, method string) []reflect.Value {
	fn := reflect.ValueOf(d).MethodByName(method)
	args := make([]reflect.Value, fn.Type().NumIn())
	for i := range args {
		args[i] = reflect.Zero(fn.Type().In(i))
	}
	return fn.Call(args)
}

func TestEveryDriverCallCanBeMadeToFailButTheDocumentedFew(t *testing.T) {
	dev, faults := openFaulty(t)
	d := dev.Driver()
	var mu sync.Mutex
	var last gputest.Call
	faults.FailWhen(func(c gputest.Call) bool { mu.Lock(); defer mu.Unlock(); last = c; return true })
	defer faults.FailWhen(nil) // the device closes cleanly
	for _, m := range driverMethods(t, d) {
		if neverFail[m.Name] {
			if m.Name != "Close" {
				t.Run(m.Name+" never fails", func(t *testing.T) {
					mu.Lock()
					last = gputest.Call{}
					mu.Unlock()
					callWithZeros(d, m.Name)
					mu.Lock()
					defer mu.Unlock()
					assert.Zero(t, last, "no fault was asked about")
				})
			}
			continue
		}
		t.Run(m.Name+" fails as "+opOf[m.Name].String(), func(t *testing.T) {
			out := callWithZeros(d, m.Name)
			err, _ := out[len(out)-1].Interface().(error)
			assert.ErrorIs(t, err, gputest.ErrInjected)
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, m.Name, last.Method)
			assert.Equal(t, opOf[m.Name], last.Op)
		})
	}
}

func TestAHeldStreamRunsNothingUntilReleased(t *testing.T) {
	dev, faults := openFaulty(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		release, err := faults.Hold(st)
		require.NoError(t, err)
		ran := make(chan struct{})
		require.NoError(t, faults.Enqueue(st, func() error { close(ran); return nil }))
		streams, _, _ := faults.Handles()
		assert.Equal(t, 1, streams)
		select {
		case <-ran:
			t.Error("work queued on a held stream ran")
		default:
		}
		release()
		release() // a second release does nothing
		require.NoError(t, st.Synchronize())
		<-ran
		return nil
	}))
	streams, events, pinned := faults.Handles()
	assert.Zero(t, streams+events+pinned, "the scope's stream ended with it")
}

func TestHoldRefusesAStreamOfAnotherDevice(t *testing.T) {
	dev, faults := openFaulty(t)
	other, otherFaults := openFaulty(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		mine, err := s.NewStream()
		require.NoError(t, err)
		return gpu.WithScope(context.Background(), other, func(o *gpu.Scope) error {
			theirs, err := o.NewStream()
			require.NoError(t, err)
			held, err := faults.Hold(theirs)
			assert.ErrorContains(t, err, "gputest: Hold: not a live stream of this device")
			ev, err := mine.Record()
			require.NoError(t, err)
			done, err := ev.Done()
			require.NoError(t, err)
			assert.True(t, done, "the device's own stream was not held in its place")
			if held != nil {
				held()
			}
			release, err := otherFaults.Hold(theirs)
			require.NoError(t, err, "its own device holds it")
			release()
			return nil
		})
	}))
}

func TestTheDefaultStreamIsNeverHeldAndRunsEnqueuedWorkAtOnce(t *testing.T) {
	_, faults := openFaulty(t)
	_, err := faults.Hold(nil)
	assert.ErrorContains(t, err, "gputest: Hold: the default stream never waits")
	ran := false
	require.NoError(t, faults.Enqueue(nil, func() error { ran = true; return nil }))
	assert.True(t, ran)
	assert.ErrorContains(t, faults.Enqueue(nil, nil), "gputest: Enqueue: nil function")
}

func TestOpenFaultyRefusesWhatItCannotHonour(t *testing.T) {
	_, _, err := gputest.OpenFaulty(1 << 20)
	assert.ErrorContains(t, err, "gputest: OpenFaulty(1048576): the capacity is at least 2.00 MiB")
	_, _, err = gputest.OpenFaulty(64<<20, gpu.HostMemory(64<<20))
	assert.ErrorContains(t, err, "HostMemory is for OpenHost")
	_, _, err = gputest.OpenFaulty(64<<20, nil)
	assert.Error(t, err)
}

func TestFailNthPanicsForWhatIsNotAnOp(t *testing.T) {
	_, faults := openFaulty(t)
	assert.PanicsWithValue(t, "gputest: FailNth(Op(0), 1): not an Op, or a negative count", func() { faults.FailNth(0, 1) })
	assert.Panics(t, func() { faults.FailNth(gputest.OpAlloc, -1) })
	assert.Equal(t, "Op(99)", gputest.Op(99).String())
}

func TestFaultsAreSafeForConcurrentUse(t *testing.T) {
	dev, faults := openFaulty(t)
	faults.FailWhen(func(c gputest.Call) bool { return c.Op == gputest.OpCopy && c.N%3 == 0 })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				_ = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
					b, err := s.Alloc(4096)
					if err != nil {
						return err
					}
					return b.CopyFromHost(make([]byte, 4096))
				})
				faults.FailNth(gputest.OpAlloc, 5)
				_ = faults.Injected()
			}
		})
	}
	wg.Wait()
	assert.Positive(t, faults.Injected())
	require.NoError(t, dev.EmptyCache())
	assert.Zero(t, faults.Used(), "every fault lost nothing")
}

// warm runs a request of three 1 MiB buffers in scope "request": once the
// pool has served it, it serves it again from its cache.
func warm(dev *gpu.Device) error {
	return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		for range 3 {
			if _, err := s.Alloc(1 << 20); err != nil {
				return err
			}
		}
		return nil
	}, gpu.Name("request"))
}

func TestOpRequestFailsAnAllocationTheCacheWouldServe(t *testing.T) {
	dev, faults := openFaulty(t)
	require.NoError(t, warm(dev))
	faults.FailNth(gputest.OpAlloc, 1)
	require.NoError(t, warm(dev), "a warm pool makes no driver call: OpAlloc has nothing to fail")
	assert.Zero(t, faults.Injected())
	faults.FailNth(gputest.OpAlloc, 0)

	before := dev.Stats()
	faults.FailNth(gputest.OpRequest, 2) // the second allocation from now
	err := warm(dev)
	require.Error(t, err)
	assert.ErrorIs(t, err, gpu.ErrOutOfMemory, "it reads as what it stands for")
	assert.ErrorIs(t, err, gputest.ErrInjected, "and a test tells it from a real one")
	oom, ok := errors.AsType[*gpu.OOMError](err)
	require.True(t, ok, "the error a real out of memory returns: %v", err)
	assert.Equal(t, "request", oom.Scope)
	assert.Equal(t, int64(1<<20), oom.Requested)
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, `gpu: out of memory: 1.00 MiB in scope "request": injected fault: Alloc of 1.00 MiB, request 8, by FailNth; largest holders: scope "request" 1.00 MiB in 1 buffer`), msg)
	assert.NotContains(t, msg, "to fit", "no advice: no memory was short")
	assert.NotContains(t, msg, "EmptyCache")
	assert.Equal(t, 1, faults.Injected())
	after := dev.Stats()
	assert.Equal(t, before.Allocs+1, after.Allocs, "the first allocation was served, the second never reached the pool")
	assert.Equal(t, before.Reserved, after.Reserved)
	assert.Zero(t, after.OOMs, "the device never ran out")
	require.NoError(t, warm(dev), "once, and only once")
}

func TestOpRequestCoversEveryAllocationAScopeAsksFor(t *testing.T) {
	dev, faults := openFaulty(t)
	var seen []gputest.Call
	faults.FailWhen(func(c gputest.Call) bool {
		if c.Op == gputest.OpRequest {
			seen = append(seen, c)
			return true
		}
		return false
	})
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(100)
		assert.ErrorIs(t, err, gpu.ErrOutOfMemory)
		_, err = gpu.Alloc[float32](s, 10)
		assert.ErrorIs(t, err, gputest.ErrInjected)
		_, err = gpu.AllocHost[byte](s, 1000)
		assert.ErrorIs(t, err, gpu.ErrOutOfMemory)
		assert.ErrorIs(t, err, gputest.ErrInjected)
		assert.EqualError(t, err, "gpu: out of memory: AllocHost of 1000 B: injected fault: AllocHost of 1000 B, request 3, by FailWhen")
		return nil
	}, gpu.Name("outer"))
	require.NoError(t, err)
	_, err = dev.NewScope(gpu.Name("weights"), gpu.Reserve(1<<20))
	assert.ErrorIs(t, err, gpu.ErrOutOfMemory)
	assert.ErrorIs(t, err, gputest.ErrInjected)
	assert.EqualError(t, err, `gpu: out of memory: 1.00 MiB in scope "weights": injected fault: Reserve of 1.00 MiB, request 4, by FailWhen`)
	assert.Equal(t, []gputest.Call{
		{Op: gputest.OpRequest, Method: "Alloc", Size: 100, N: 1},
		{Op: gputest.OpRequest, Method: "Alloc", Size: 40, N: 2},
		{Op: gputest.OpRequest, Method: "AllocHost", Size: 1000, N: 3},
		{Op: gputest.OpRequest, Method: "Reserve", Size: 1 << 20, N: 4},
	}, seen)
	st := dev.Stats()
	assert.Zero(t, st.Allocs+st.Reserved+st.PinnedAllocated, "no request reached the pool")
	assert.Zero(t, st.OpenScopes, "the scope whose reservation failed is not open")
	assert.Equal(t, "request", gputest.OpRequest.String())
}

// An injected out of memory is the request's failure: a scope that would
// wait for memory fails at once, and nothing is evicted to make room.
func TestAnInjectedRequestNeitherWaitsNorEvicts(t *testing.T) {
	dev, faults := openFaulty(t)
	cached, err := dev.NewScope(gpu.Name("cached"), gpu.Evictable(0))
	require.NoError(t, err)
	defer cached.Close()
	_, err = cached.Alloc(1 << 20)
	require.NoError(t, err)
	faults.FailNth(gputest.OpRequest, 1)
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(1 << 20)
		return err
	}, gpu.WaitForMemory())
	assert.ErrorIs(t, err, gputest.ErrInjected)
	assert.Zero(t, dev.Stats().Evictions)
	_, err = cached.Alloc(64)
	assert.NoError(t, err, "the evictable scope is still there")
}

// docs/leaks.md quotes the errors an injected fault makes a scope's caller
// receive: they are what the code prints.
func TestLeaksMdQuotesTheInjectedErrorsTheCodePrints(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "leaks.md"))
	require.NoError(t, err)
	text := strings.Join(strings.Fields(string(doc)), " ") // the quotes wrap across lines

	dev, faults := openFaulty(t)
	faults.FailNth(gputest.OpAlloc, 1)
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(1 << 20)
		return err
	}, gpu.Name("load"))
	require.ErrorIs(t, err, gputest.ErrInjected)
	assert.Contains(t, text, "`"+err.Error()+"`", "a driver call's fault, as leaks.md quotes it")

	for range 6 { // requests 2 to 7: the 8th fails, as in leaks.md
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(1 << 20)
			return err
		}))
	}
	faults.FailNth(gputest.OpRequest, 1)
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(1 << 20)
		return err
	}, gpu.Name("request"))
	require.ErrorIs(t, err, gputest.ErrInjected)
	assert.Contains(t, text, "`"+err.Error()+"`", "a request's fault, as leaks.md quotes it")
}

// A size the pool refuses is refused as such on a faulty device too: it is
// not a request, and the fault stays for the next one.
func TestAnInvalidSizeTakesNoInjectedFault(t *testing.T) {
	dev, faults := openFaulty(t)
	faults.FailNth(gputest.OpRequest, 1)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(-1)
		assert.ErrorIs(t, err, gpu.ErrInvalidSize)
		assert.NotErrorIs(t, err, gputest.ErrInjected)
		_, err = s.Alloc(1 << 20)
		assert.ErrorIs(t, err, gputest.ErrInjected, "the fault waited for this request")
		return nil
	})
	require.NoError(t, err)
}
