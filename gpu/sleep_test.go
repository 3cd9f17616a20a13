// The host device maps pages on Linux only, and a Sleepable scope needs
// them (GPUs run Linux too).

//go:build linux

package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// pattern returns n bytes that differ from one position to the next, seeded
// by seed: a buffer that holds them was copied whole and in place.
func pattern(seed byte, n int64) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(i*31) ^ seed
	}
	return out
}

// loadSleepable opens a Sleepable scope with opts, closed when the test
// ends, and fills a buffer of n bytes in it with pattern(seed, n).
func loadSleepable(t testing.TB, dev *gpu.Device, seed byte, n int64, opts ...gpu.ScopeOption) (*gpu.Scope, gpu.Buffer) {
	t.Helper()
	s, err := dev.NewScope(append(opts, gpu.Sleepable())...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	b, err := s.Alloc(n)
	require.NoError(t, err)
	require.NoError(t, b.CopyFromHost(pattern(seed, n)))
	return s, b
}

// holdsPattern asserts that b holds pattern(seed, size).
func holdsPattern(t testing.TB, b gpu.Buffer, seed byte) {
	t.Helper()
	got := make([]byte, b.Size())
	require.NoError(t, b.CopyToHost(got))
	require.True(t, string(got) == string(pattern(seed, b.Size())), "the buffer lost what it held")
}

func TestASleepingScopeGivesItsMemoryBackAndWakesWhereItWas(t *testing.T) {
	ctx := context.Background()
	dev, faults := openTestHost(t)
	s, b := loadSleepable(t, dev, 7, 3*slotSize+1000, gpu.Name("weights"))
	child, err := gpu.Alloc[float32](s, 1000)
	require.NoError(t, err)
	require.NoError(t, child.CopyFromHost(make([]float32, 1000)))
	require.NoError(t, dev.EmptyCache(), "the scope's pool caches nothing now")
	ptr, used := b.Ptr(), faults.Used()
	require.Equal(t, used, dev.Stats().Reserved, "the scope's pool holds its pages, counted by the device's")

	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	assert.Zero(t, faults.Used(), "every page went back to the driver")
	st := dev.Stats()
	assert.Zero(t, st.Reserved)
	assert.Zero(t, st.Allocated, "buffers asleep hold no device memory")
	assert.Equal(t, int64(3*slotSize+1024+4096), st.Sleeping)
	assert.Equal(t, int64(2), st.SleepingBuffers)
	assert.Equal(t, used, st.SleepingReleased)
	assert.Equal(t, used, st.SleepingKept, "the pages' bytes, kept")
	assert.Equal(t, 1, st.SleepingScopes)
	assert.True(t, s.Stats().Asleep)
	assert.Contains(t, dev.Summary(), "sleepable, asleep")
	assert.Contains(t, dev.Summary(), "asleep ")

	// Meanwhile another scope may take all of the memory, and give it back.
	err = gpu.WithScope(ctx, dev, func(o *gpu.Scope) error {
		x, err := o.Alloc(used)
		if err == nil {
			err = x.Memset(0xAA)
		}
		return err
	})
	require.NoError(t, err)

	require.NoError(t, s.Wake(ctx))
	assert.Equal(t, ptr, b.Ptr(), "the same address")
	holdsPattern(t, b, 7)
	got := make([]float32, 1000)
	require.NoError(t, child.CopyToHost(got))
	st = dev.Stats()
	assert.Zero(t, st.Sleeping)
	assert.Zero(t, st.SleepingKept)
	assert.Equal(t, int64(1), st.Sleeps)
	assert.Equal(t, int64(1), st.Wakes)
	assert.Positive(t, st.PinnedCached, "the backup went back to the cache of page-locked memory, for the next Sleep")
	require.NoError(t, dev.EmptyCache())
	assert.Equal(t, used, faults.Used(), "the pages are back")
}

func TestDiscardedContentsWakeAsZeros(t *testing.T) {
	ctx := context.Background()
	dev := testDevice(t, 0)
	s, b := loadSleepable(t, dev, 3, 2*slotSize)
	require.NoError(t, s.Sleep(ctx, gpu.DiscardContents))
	assert.Zero(t, dev.Stats().SleepingKept, "nothing copied")
	require.NoError(t, s.Wake(ctx))
	got := make([]byte, b.Size())
	require.NoError(t, b.CopyToHost(got))
	assert.Equal(t, make([]byte, b.Size()), got)
}

func TestEveryUseOfABufferAsleepFailsWithErrAsleep(t *testing.T) {
	ctx := context.Background()
	dev := testDevice(t, 0)
	s, b := loadSleepable(t, dev, 1, slotSize)
	x, err := gpu.Alloc[float32](s, 64)
	require.NoError(t, err)
	awake, err := dev.NewScope()
	require.NoError(t, err)
	defer awake.Close()
	other, err := awake.Alloc(slotSize)
	require.NoError(t, err)
	st, err := awake.NewStream()
	require.NoError(t, err)
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))

	calls := map[string]error{}
	calls["CopyFromHost"] = b.CopyFromHost([]byte{1})
	calls["CopyToHost"] = b.CopyToHost(make([]byte, 1))
	calls["CopyFrom into it"] = b.CopyFrom(other)
	calls["CopyFrom out of it"] = other.CopyFrom(b)
	calls["Memset"] = b.Memset(0)
	calls["Use"] = b.Use(func(uintptr) error { t.Error("Use ran asleep"); return nil })
	_, calls["View"] = b.View(0, 10)
	calls["RecordUse"] = b.RecordUse(st)
	calls["Slice.CopyFromHost"] = x.CopyFromHost(make([]float32, 64))
	_, calls["Slice.View"] = x.View(0, 1)
	_, calls["Alloc"] = s.Alloc(512)
	err = gpu.WithScope(s.Context(), dev, func(c *gpu.Scope) error {
		_, err := c.Alloc(512)
		return err
	})
	calls["Alloc in a child"] = err
	calls["Sleep again"] = s.Sleep(ctx, gpu.KeepContents)
	for name, err := range calls {
		assert.ErrorIs(t, err, gpu.ErrAsleep, name)
	}
	assert.Zero(t, b.Ptr(), "no address while asleep: nothing to launch a kernel on")
	require.NoError(t, s.Wake(ctx))
	holdsPattern(t, b, 1)
	require.NoError(t, s.Free(b))
}

func TestAFreeAsleepTouchesNoMemoryAndWakeTakesBackOnlyWhatLiveBuffersHold(t *testing.T) {
	ctx := context.Background()
	dev, faults := openTestHost(t)
	s, a := loadSleepable(t, dev, 1, 3*slotSize, gpu.Name("kv"))
	b, err := s.Alloc(4 * slotSize)
	require.NoError(t, err)
	require.NoError(t, b.CopyFromHost(pattern(2, b.Size())))
	st, err := s.NewStream()
	require.NoError(t, err)
	x, err := gpu.Alloc[byte](s, 4096)
	require.NoError(t, err)
	require.NoError(t, x.RecordUse(st), "used on another stream: its free would record an event there")
	y, err := gpu.Alloc[byte](s, 4096) // in x's page
	require.NoError(t, err)
	require.NoError(t, y.CopyFromHost(pattern(3, 4096)))
	require.NoError(t, dev.EmptyCache())
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	before := dev.Stats()
	t.Logf("asleep: %d released, %d kept", before.SleepingReleased, before.SleepingKept)

	var calls []gputest.Call
	faults.FailWhen(func(c gputest.Call) bool { calls = append(calls, c); return false })
	require.NoError(t, s.Free(b), "a free asleep")
	require.NoError(t, s.Free(x.Buffer), "a free asleep of a buffer another stream used")
	assert.Empty(t, calls, "a free asleep calls no driver: it touches no memory and waits for no stream")
	after := dev.Stats()
	t.Logf("after: %d released", after.SleepingReleased)
	assert.Equal(t, before.Sleeping-b.Size()-4096, after.Sleeping, "what sleeps went down by what was freed")
	assert.Equal(t, int64(2), after.SleepingBuffers)
	assert.Equal(t, a.Size()+4096, s.Stats().Live)
	assert.Zero(t, after.Allocated)
	assert.Less(t, after.SleepingReleased, before.SleepingReleased, "the pages that held only what was freed are no longer the scope's to take back")
	assert.ErrorIs(t, s.Free(b), gpu.ErrFreed)
	assert.Zero(t, b.Ptr())

	calls = nil
	require.NoError(t, s.Wake(ctx))
	faults.FailWhen(nil)
	var created, copied int64
	for _, c := range calls {
		switch {
		case c.Op == gputest.OpAlloc && c.Method == "Create":
			created += c.Size
		case c.Op == gputest.OpCopy:
			copied += c.Size
		}
	}
	assert.Equal(t, after.SleepingReleased, created, "Wake takes back what the stats said")
	assert.Equal(t, a.Size()+4096, copied, "Wake copies back what the live buffers hold, not what was freed asleep beside them")
	assert.Equal(t, created, faults.Used())
	holdsPattern(t, a, 1)
	holdsPattern(t, y.Buffer, 3)
}

func TestScopesInsideASleepableOneSleepWithIt(t *testing.T) {
	ctx := context.Background()
	dev := testDevice(t, 0)
	s, err := dev.NewScope(gpu.Name("trainer"), gpu.Sleepable())
	require.NoError(t, err)
	defer s.Close()
	var kept gpu.Buffer
	err = gpu.WithScope(s.Context(), dev, func(c *gpu.Scope) error {
		b, err := c.Alloc(slotSize)
		require.NoError(t, err)
		require.NoError(t, b.CopyFromHost(pattern(4, slotSize)))
		kept = b
		require.NoError(t, s.Sleep(ctx, gpu.KeepContents), "a scope sleeps with the scopes open inside it")
		assert.True(t, c.Stats().Asleep)
		assert.ErrorIs(t, c.Keep(b), gpu.ErrAsleep)
		require.NoError(t, s.Wake(ctx))
		holdsPattern(t, b, 4)
		return c.Keep(b) // into the Sleepable scope: allowed
	})
	require.NoError(t, err)
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	require.NoError(t, s.Wake(ctx))
	holdsPattern(t, kept, 4)

	assert.ErrorIs(t, s.Keep(kept), gpu.ErrNotKept, "a root has no parent")
	err = gpu.WithScope(ctx, dev, func(outer *gpu.Scope) error {
		return gpu.WithScope(outer.Context(), dev, func(in *gpu.Scope) error {
			b, err := in.Alloc(512)
			require.NoError(t, err)
			assert.ErrorIs(t, in.Keep(b), gpu.ErrNotKept, "a buffer cannot leave the memory that sleeps")
			return gpu.WithScope(in.Context(), dev, func(*gpu.Scope) error { return nil }, gpu.Sleepable())
		}, gpu.Sleepable())
	})
	assert.Error(t, err, "a Sleepable scope inside another")

	plain, err := dev.NewScope()
	require.NoError(t, err)
	defer plain.Close()
	assert.ErrorIs(t, plain.Sleep(ctx, gpu.KeepContents), gpu.ErrNotSupported)
	assert.ErrorIs(t, plain.Wake(ctx), gpu.ErrNotSupported)
}

func TestAScopeEndsAsleepWithoutWaking(t *testing.T) {
	ctx := context.Background()
	dev, faults := openTestHost(t)
	err := gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(slotSize)
		require.NoError(t, err)
		require.NoError(t, b.CopyFromHost(pattern(2, slotSize)))
		return s.Sleep(ctx, gpu.KeepContents)
	}, gpu.Sleepable(), gpu.Zeroed())
	require.NoError(t, err)
	assert.Zero(t, faults.Used())
	st := dev.Stats()
	assert.Zero(t, st.Sleeping)
	assert.Zero(t, st.SleepingKept)
	assert.Zero(t, st.PinnedAllocated, "its backup went back to the cache")

	s, _ := loadSleepable(t, dev, 5, slotSize)
	require.NoError(t, s.Sleep(ctx, gpu.DiscardContents))
	assert.ErrorIs(t, s.Close(), nil, "closing a scope asleep")
	assert.ErrorIs(t, s.Wake(ctx), gpu.ErrScopeClosed)
	assert.ErrorIs(t, s.Sleep(ctx, gpu.KeepContents), gpu.ErrScopeClosed)
}

func TestASleepingScopeLeftOpenIsALeak(t *testing.T) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	s, _ := func() (*gpu.Scope, gpu.Buffer) {
		s, err := dev.NewScope(gpu.Name("forgotten"), gpu.Sleepable())
		require.NoError(t, err)
		b, err := s.Alloc(4096)
		require.NoError(t, err)
		return s, b
	}()
	require.NoError(t, s.Sleep(context.Background(), gpu.KeepContents))
	err = gputest.Find(gputest.Devices("host"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "forgotten")
	err = dev.Close()
	assert.ErrorContains(t, err, "closed with 1 scope open: forgotten", "Close ends a scope asleep as any, and says so")
	assert.NoError(t, gputest.Find(gputest.Devices("host")), "reported before the Close, it is not reported twice")
}

func TestWakeUnderACapTakesItsMemoryAsAnAllocationWould(t *testing.T) {
	ctx := context.Background()
	var heard []error
	dev := testDevice(t, 0)
	require.NoError(t, dev.SetMaxReserved(4*slotSize))
	dev2, _ := openTestHost(t, gpu.MaxReserved(4*slotSize), gpu.OnOutOfMemory(func(err error) { heard = append(heard, err) }))
	for _, d := range []*gpu.Device{dev, dev2} {
		s, b := loadSleepable(t, d, 9, 3*slotSize)
		require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
		other, err := d.NewScope(gpu.Name("server"))
		require.NoError(t, err)
		x, err := other.Alloc(3 * slotSize)
		require.NoError(t, err, "the memory given back is the cap's too")

		err = s.Wake(ctx)
		require.ErrorIs(t, err, gpu.ErrOutOfMemory, "the cap has room for one page of three")
		var oom *gpu.OOMError
		require.ErrorAs(t, err, &oom)
		assert.Contains(t, err.Error(), "cap", "the cap refused it")
		assert.True(t, s.Stats().Asleep, "a Wake that fails leaves the scope asleep")
		assert.ErrorIs(t, b.CopyToHost(make([]byte, 1)), gpu.ErrAsleep)

		require.NoError(t, other.Free(x))
		require.NoError(t, s.Wake(ctx), "the device's cache gives back what the other scope freed")
		holdsPattern(t, b, 9)
		require.NoError(t, other.Close())
	}
	assert.NotEmpty(t, heard, "OnOutOfMemory hears a Wake that found no room")
}

func TestWakeWaitsForMemoryInAWaitForMemoryScope(t *testing.T) {
	ctx := context.Background()
	refused := make(chan struct{}, 10)
	dev := openHost(t, gpu.HostMemory(4*slotSize), gpu.OnOutOfMemory(func(error) { refused <- struct{}{} }))
	s, b := loadSleepable(t, dev, 6, 3*slotSize, gpu.WaitForMemory())
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	other, err := dev.NewScope()
	require.NoError(t, err)
	defer other.Close()
	x, err := other.Alloc(3 * slotSize)
	require.NoError(t, err)

	woke := make(chan error, 1)
	go func() { woke <- s.Wake(ctx) }()
	select {
	case <-refused: // it found no room, and waits
	case err := <-woke:
		t.Fatalf("woke with %v: %s", err, dev.Summary())
	}
	require.NoError(t, other.Free(x), "a release wakes it")
	require.NoError(t, <-woke)
	holdsPattern(t, b, 6)

	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	_, err = other.Alloc(3 * slotSize)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	go func() { woke <- s.Wake(cctx) }()
	<-refused
	cancel()
	err = <-woke
	assert.ErrorIs(t, err, gpu.ErrOutOfMemory)
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, s.Stats().Asleep, "given up, it sleeps on, its contents kept")

	go func() { woke <- s.Wake(ctx) }()
	<-refused
	require.NoError(t, s.Close(), "the scope's end stops a Wake waiting, and does not wait for it")
	assert.ErrorIs(t, <-woke, gpu.ErrScopeClosed)
	require.NoError(t, other.Close())
}

func TestWakeEvictsIdleEvictableScopesAndNeverEvictsOneAsleep(t *testing.T) {
	ctx := context.Background()
	dev := openHost(t, gpu.HostMemory(3*slotSize))
	s, b := loadSleepable(t, dev, 8, 2*slotSize, gpu.Evictable(0))
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	cache, _ := load(t, dev, 1, gpu.Evictable(0))
	require.NoError(t, allocElsewhere(t, dev), "the device is full, and nothing asleep was evicted for it")
	assert.False(t, evicted(s))
	require.NoError(t, s.Wake(ctx), "the idle evictable scope made room")
	assert.True(t, evicted(cache))
	holdsPattern(t, b, 8)
}

func TestSleepWaitsForTheWorkQueuedOnItsStreams(t *testing.T) {
	ctx := context.Background()
	dev, faults := openTestHost(t)
	s, err := dev.NewScope(gpu.Sleepable())
	require.NoError(t, err)
	defer s.Close()
	st, err := s.NewStream()
	require.NoError(t, err)
	err = gpu.WithScope(s.Context(), dev, func(c *gpu.Scope) error {
		b, err := c.Alloc(4096)
		require.NoError(t, err)
		release, err := faults.Hold(st)
		require.NoError(t, err)
		require.NoError(t, b.Use(func(ptr uintptr) error {
			return faults.Enqueue(st, func() error { return nil }) // a kernel, held
		}))
		require.NoError(t, b.Memset(5), "queued on the stream, behind the held work")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		assert.ErrorIs(t, s.Sleep(cctx, gpu.KeepContents), context.Canceled)
		done := make(chan error, 1)
		go func() {
			done <- s.Sleep(context.WithoutCancel(ctx), gpu.KeepContents)
		}()
		release()
		require.NoError(t, <-done)
		require.NoError(t, s.Wake(ctx))
		got := make([]byte, 4096)
		require.NoError(t, b.CopyToHost(got))
		assert.Equal(t, bytesOf(5, 4096), got, "what the stream wrote before Sleep was kept")
		return nil
	}, gpu.OnStream(st))
	require.NoError(t, err)
}

func TestManySleepsAndWakesHoldNothingMore(t *testing.T) {
	ctx := context.Background()
	dev, faults := openTestHost(t)
	s, b := loadSleepable(t, dev, 3, 3*slotSize)
	scratch := 0
	cycle := func() error {
		for _, c := range []gpu.Contents{gpu.KeepContents, gpu.DiscardContents} {
			if err := s.Sleep(ctx, c); err != nil {
				return err
			}
			if err := s.Wake(ctx); err != nil {
				return err
			}
		}
		scratch++
		return b.CopyFromHost(pattern(3, b.Size()))
	}
	require.NoError(t, cycle())
	before, used := dev.Stats(), faults.Used()
	gputest.Steady(t, 2, 20, cycle)
	after := dev.Stats()
	assert.Equal(t, used, faults.Used())
	assert.Equal(t, before.Reserved, after.Reserved)
	assert.Equal(t, before.PinnedAllocated+before.PinnedCached, after.PinnedAllocated+after.PinnedCached,
		"each Sleep takes its backup from the cache the Wake before gave it back to")
	_, _, pinned := faults.Handles()
	assert.Equal(t, 1, pinned, "the backup is one chunk, which every Sleep takes from the cache again")
	holdsPattern(t, b, 3)
}

func TestUsesRacingSleepAndWakeFailCleanlyOrRun(t *testing.T) {
	ctx := context.Background()
	dev := testDevice(t, 0)
	s, b := loadSleepable(t, dev, 0, slotSize)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := b.CopyToHost(buf)
				if err != nil && !errors.Is(err, gpu.ErrAsleep) {
					t.Errorf("a use met the memory asleep: %v", err)
					return
				}
			}
		})
	}
	for range 30 {
		require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
		require.NoError(t, s.Wake(ctx))
	}
	close(stop)
	wg.Wait()
	holdsPattern(t, b, 0)
}

func TestAFaultAtAnyDriverCallOfSleepOrWakeLosesNothing(t *testing.T) {
	ctx := context.Background()
	ops := []gputest.Op{gputest.OpAlloc, gputest.OpFree, gputest.OpCopy, gputest.OpStream, gputest.OpEvent,
		gputest.OpReserve, gputest.OpMap, gputest.OpAccess, gputest.OpUnmap}
	for _, contents := range []gpu.Contents{gpu.KeepContents, gpu.DiscardContents} {
		for _, op := range ops {
			for n := 1; ; n++ {
				if !sleepAndWakeWithAFault(t, ctx, contents, op, n) {
					break // the nth call of op is past both
				}
			}
		}
	}
}

// sleepAndWakeWithAFault makes the nth driver call of op from the start of
// a Sleep fail, then the nth from the start of a Wake, and checks that
// each either failed whole (the scope as it was, a retry working) or went
// through; it reports whether a fault was injected.
func sleepAndWakeWithAFault(t *testing.T, ctx context.Context, contents gpu.Contents, op gputest.Op, n int) bool {
	var dropped []error
	dev, faults := openTestHost(t, gpu.OnReleaseError(func(err error) { dropped = append(dropped, err) }))
	s, b := loadSleepable(t, dev, byte(n), 3*slotSize+4096)
	st, err := s.NewStream()
	require.NoError(t, err)
	x, err := gpu.Alloc[byte](s, 4096) // a buffer of the small arena
	require.NoError(t, err)
	require.NoError(t, x.CopyFromHost(pattern(byte(n+1), 4096)))
	require.NoError(t, x.RecordUse(st))
	want := func(seed byte, b gpu.Buffer) {
		t.Helper()
		if contents == gpu.KeepContents {
			holdsPattern(t, b, seed)
			return
		}
		got := make([]byte, b.Size())
		require.NoError(t, b.CopyToHost(got))
		require.Equal(t, make([]byte, b.Size()), got)
	}
	what := func(phase string) string { return fmt.Sprintf("%s with %v call %d", phase, op, n) }

	faults.FailNth(op, n)
	err = s.Sleep(ctx, contents)
	faults.FailNth(op, 0)
	injected := faults.Injected()
	if err != nil {
		require.ErrorIs(t, err, gputest.ErrInjected, what("Sleep"))
		require.False(t, s.Stats().Asleep, what("a Sleep that failed leaves the scope awake"))
		holdsPattern(t, b, byte(n))
		require.NoError(t, s.Sleep(ctx, contents), what("Sleep after a failed one"))
	}
	require.True(t, s.Stats().Asleep)

	usedAsleep := faults.Used()
	faults.FailNth(op, n)
	err = s.Wake(ctx)
	faults.FailNth(op, 0)
	if err != nil {
		require.ErrorIs(t, err, gputest.ErrInjected, what("Wake"))
		require.True(t, s.Stats().Asleep, what("a Wake that failed leaves the scope asleep"))
		require.Equal(t, usedAsleep, faults.Used(), what("a Wake that failed gives back what it took"))
		require.NoError(t, s.Wake(ctx), what("Wake after a failed one"))
	}
	t.Logf("%s: %d faults injected", what("the cycle"), faults.Injected())
	want(byte(n), b)
	want(byte(n+1), x.Buffer)
	require.NoError(t, s.Close())
	require.NoError(t, dev.EmptyCache())
	assert.Zero(t, faults.Used(), what("every page went back"))
	for _, err := range dropped {
		assert.ErrorIs(t, err, gputest.ErrInjected, what("only the fault goes unheard"))
	}
	return faults.Injected() > 0 || injected > 0
}

func TestAWakeWaitingForMemoryHoldsUpNoOtherScopesEnd(t *testing.T) {
	ctx := context.Background()
	refused := make(chan struct{}, 10)
	dev := openHost(t, gpu.HostMemory(5*slotSize), gpu.OnOutOfMemory(func(error) { refused <- struct{}{} }))
	s, b := loadSleepable(t, dev, 4, 3*slotSize, gpu.WaitForMemory())
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	big, err := dev.NewScope()
	require.NoError(t, err)
	_, err = big.Alloc(3 * slotSize)
	require.NoError(t, err)
	small, err := dev.NewScope()
	require.NoError(t, err)
	st, err := small.NewStream()
	require.NoError(t, err)
	err = gpu.WithScope(small.Context(), dev, func(c *gpu.Scope) error {
		x, err := c.Alloc(4096)
		if err == nil {
			err = c.Keep(x)
		}
		return err
	}, gpu.OnStream(st))
	require.NoError(t, err)

	woke := make(chan error, 1)
	go func() { woke <- s.Wake(ctx) }()
	<-refused
	require.NoError(t, small.Close(), "a stream's scope ends while a Wake waits: its stream's retirement reaches the sleeping pool")
	require.NoError(t, big.Close())
	require.NoError(t, <-woke)
	holdsPattern(t, b, 4)
}

func TestAWakeRestoresOnlyThePagesTheScopeStillHas(t *testing.T) {
	ctx := context.Background()
	dev, faults := openTestHost(t)
	s, b := loadSleepable(t, dev, 5, 2*slotSize)
	err := gpu.WithScope(s.Context(), dev, func(c *gpu.Scope) error {
		_, err := c.Alloc(4 * slotSize)
		require.NoError(t, err)
		return s.Sleep(ctx, gpu.KeepContents) // the scope inside ends asleep: its memory is free in the pool asleep
	})
	require.NoError(t, err)
	// A stream's end reaches the pool asleep, which gives back what it
	// caches: pages Sleep kept the contents of.
	other, err := dev.NewScope()
	require.NoError(t, err)
	_, err = other.NewStream()
	require.NoError(t, err)
	require.NoError(t, other.Close())

	require.NoError(t, s.Wake(ctx), "the pages given back while asleep are not copied back into")
	holdsPattern(t, b, 5)
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	require.NoError(t, s.Wake(ctx))
	holdsPattern(t, b, 5)
	require.NoError(t, s.Close())
	require.NoError(t, dev.EmptyCache())
	assert.Zero(t, faults.Used())
}

func TestAWakeEvictsAScopeThatOwnsAStream(t *testing.T) {
	ctx := context.Background()
	dev := openHost(t, gpu.HostMemory(3*slotSize))
	s, b := loadSleepable(t, dev, 8, 2*slotSize)
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	cache, err := dev.NewScope(gpu.Evictable(0))
	require.NoError(t, err)
	defer cache.Close()
	_, err = cache.NewStream() // its end retires the stream in every Sleepable scope's pool
	require.NoError(t, err)
	_, err = cache.Alloc(2 * slotSize)
	require.NoError(t, err)

	require.NoError(t, s.Wake(ctx), "the eviction's end of the stream does not wait for the Wake that evicts")
	assert.True(t, evicted(cache))
	holdsPattern(t, b, 8)
}

func TestScrubFreedHoldsForBuffersFreedAsleep(t *testing.T) {
	ctx := context.Background()
	dev := openHost(t, gpu.ScrubFreed())
	s, b := loadSleepable(t, dev, 6, slotSize)
	var at uintptr
	err := gpu.WithScope(s.Context(), dev, func(c *gpu.Scope) error {
		x, err := c.Alloc(2 * slotSize)
		require.NoError(t, err)
		require.NoError(t, x.CopyFromHost(pattern(9, 2*slotSize)))
		at = x.Ptr()
		return s.Sleep(ctx, gpu.KeepContents) // the scope inside ends asleep: x is freed with nothing mapped to zero
	})
	require.NoError(t, err)
	require.NoError(t, s.Wake(ctx))
	holdsPattern(t, b, 6)

	y, err := s.Alloc(2 * slotSize)
	require.NoError(t, err)
	require.Equal(t, at, y.Ptr(), "the memory x had")
	got := make([]byte, y.Size())
	require.NoError(t, y.CopyToHost(got))
	assert.True(t, string(got) == string(make([]byte, y.Size())), "what x held was scrubbed, though Wake copied its pages back")
}

func TestABlockFreedAsleepBesideALiveOneInItsPage(t *testing.T) {
	ctx := context.Background()
	dev, faults := openTestHost(t, gpu.ScrubFreed())
	s, err := dev.NewScope(gpu.Sleepable())
	require.NoError(t, err)
	freed, err := gpu.Alloc[byte](s, 8192)
	require.NoError(t, err)
	other, err := gpu.Alloc[byte](s, 8192) // the same page of the small arena
	require.NoError(t, err)
	require.NoError(t, freed.CopyFromHost(pattern(1, 8192)))
	require.NoError(t, other.CopyFromHost(pattern(2, 8192)))
	at := freed.Ptr()
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	released := dev.Stats().SleepingReleased
	require.NoError(t, s.Free(freed.Buffer))
	assert.Equal(t, released, dev.Stats().SleepingReleased, "the page still holds the other block: it wakes with it")
	require.NoError(t, s.Wake(ctx))
	holdsPattern(t, other.Buffer, 2)

	again, err := gpu.Alloc[byte](s, 8192)
	require.NoError(t, err)
	require.Equal(t, at, again.Ptr(), "the memory the freed block had")
	got := make([]byte, 8192)
	require.NoError(t, again.CopyToHost(got))
	assert.Equal(t, make([]byte, 8192), got, "what the block freed asleep held is scrubbed, not copied back")

	// The page's other block, freed awake, then a cycle with the page
	// holding the new one alone.
	require.NoError(t, again.CopyFromHost(pattern(3, 8192)))
	require.NoError(t, s.Free(other.Buffer))
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	require.NoError(t, s.Wake(ctx))
	holdsPattern(t, again.Buffer, 3)
	require.NoError(t, s.Sleep(ctx, gpu.DiscardContents))
	require.NoError(t, s.Free(again.Buffer))
	assert.Zero(t, dev.Stats().SleepingReleased, "the page held nothing more: given back asleep")
	require.NoError(t, s.Wake(ctx))
	assert.Zero(t, faults.Used(), "nothing to take back")
	require.NoError(t, s.Close())
	require.NoError(t, dev.EmptyCache())
	assert.Zero(t, faults.Used())
}

func TestAWakeThatFoundNoRoomFitsOnceBuffersAreFreedAsleep(t *testing.T) {
	ctx := context.Background()
	refused := make(chan struct{}, 10)
	dev := openHost(t, gpu.HostMemory(6*slotSize), gpu.OnOutOfMemory(func(error) { refused <- struct{}{} }))
	other, err := dev.NewScope()
	require.NoError(t, err)
	defer other.Close()
	for _, waits := range []bool{false, true} {
		for len(refused) > 0 {
			<-refused // the round before's
		}
		var opts []gpu.ScopeOption
		if waits {
			opts = append(opts, gpu.WaitForMemory())
		}
		s, a := loadSleepable(t, dev, 4, 2*slotSize, opts...)
		kv, err := s.Alloc(3 * slotSize)
		require.NoError(t, err)
		require.NoError(t, dev.EmptyCache())
		require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
		x, err := other.Alloc(3 * slotSize)
		require.NoError(t, err)
		woke := make(chan error, 1)
		go func() { woke <- s.Wake(ctx) }()
		<-refused // the KV cache and the weights do not fit beside the other scope
		if !waits {
			require.ErrorIs(t, <-woke, gpu.ErrOutOfMemory)
		}
		require.NoError(t, s.Free(kv), "the KV cache dropped while asleep")
		if !waits {
			go func() { woke <- s.Wake(ctx) }()
		}
		require.NoError(t, <-woke, "the weights alone fit (waits %v)", waits)
		holdsPattern(t, a, 4)
		require.NoError(t, other.Free(x))
		require.NoError(t, s.Close())
	}
}

func TestFreesRacingSleepAndWakeEachFreeOnceAndLoseNothing(t *testing.T) {
	ctx := context.Background()
	dev, faults := openTestHost(t, gpu.ScrubFreed())
	s, kept := loadSleepable(t, dev, 7, slotSize)
	const n = 64
	bufs := make(chan gpu.Buffer, n)
	for i := range n {
		b, err := s.Alloc(int64(4096 + i*100000)) // small and large, sharing pages with each other and kept
		require.NoError(t, err)
		bufs <- b
	}
	close(bufs)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for b := range bufs {
				if err := s.Free(b); err != nil {
					t.Errorf("a free racing Sleep and Wake: %v", err)
				}
			}
		})
	}
	for i := range 10 {
		require.NoError(t, s.Sleep(ctx, gpu.Contents(i%2)))
		require.NoError(t, s.Wake(ctx))
		if i%2 == 1 {
			holdsPattern(t, kept, 7)
		}
		require.NoError(t, kept.CopyFromHost(pattern(7, kept.Size())))
	}
	wg.Wait()
	assert.Equal(t, kept.Size(), s.Stats().Live)
	require.NoError(t, s.Sleep(ctx, gpu.KeepContents))
	assert.Equal(t, kept.Size(), dev.Stats().Sleeping)
	require.NoError(t, s.Wake(ctx))
	holdsPattern(t, kept, 7)
	require.NoError(t, s.Close())
	require.NoError(t, dev.EmptyCache())
	assert.Zero(t, faults.Used())
}

func TestASleepThatCanNeitherUnmapNorMapBackSleepsOn(t *testing.T) {
	ctx := context.Background()
	var dropped []error
	dev, faults := openTestHost(t, gpu.OnReleaseError(func(err error) { dropped = append(dropped, err) }))
	s, b := loadSleepable(t, dev, 3, 3*slotSize+4096)
	x, err := gpu.Alloc[byte](s, 4096) // a page of the small arena: Sleep unmaps two
	require.NoError(t, err)
	require.NoError(t, x.CopyFromHost(pattern(4, 4096)))
	require.NoError(t, dev.EmptyCache())
	// The second page's unmap fails, then mapping the first back.
	unmaps, mapFails := 0, 0
	faults.FailWhen(func(c gputest.Call) bool {
		if c.Op == gputest.OpUnmap {
			unmaps++
			return unmaps == 2
		}
		if c.Op == gputest.OpMap && unmaps >= 2 && mapFails == 0 {
			mapFails++
			return true
		}
		return false
	})
	err = s.Sleep(ctx, gpu.KeepContents)
	faults.FailWhen(nil)
	require.Equal(t, 1, mapFails, "the fault this test is about")
	require.NoError(t, err, "half its memory unmapped, the scope cannot be awake: it sleeps")
	require.True(t, s.Stats().Asleep)
	assert.ErrorIs(t, b.CopyToHost(make([]byte, 1)), gpu.ErrAsleep, "no use reaches memory unmapped")
	require.Len(t, dropped, 1)
	assert.ErrorIs(t, dropped[0], gputest.ErrInjected)

	require.NoError(t, s.Wake(ctx))
	holdsPattern(t, b, 3)
	holdsPattern(t, x.Buffer, 4)
	require.NoError(t, s.Close())
	require.NoError(t, dev.EmptyCache())
	assert.Zero(t, faults.Used(), "nothing held")
}
