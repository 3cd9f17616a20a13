package gputest_test

import (
	"context"
	"errors"
	"reflect"
	"runtime"
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
