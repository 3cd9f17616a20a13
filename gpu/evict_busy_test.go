package gpu_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// openFaultyHost opens a host device of capacity bytes whose driver the
// test can hold busy and make fail, closed when the test ends.
func openFaultyHost(t testing.TB, capacity int64, opts ...gpu.DeviceOption) (*gpu.Device, *gputest.Faults) {
	t.Helper()
	dev, faults, err := gputest.OpenFaulty(capacity, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return dev, faults
}

// streamOf returns a stream owned by a scope that is not evictable, closed
// when the test ends.
func streamOf(t testing.TB, dev *gpu.Device) *gpu.Stream {
	t.Helper()
	owner, err := dev.NewScope(gpu.Name("streams"))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, owner.Close()) })
	st, err := owner.NewStream()
	require.NoError(t, err)
	return st
}

// hold holds st busy until the returned function, or the test's end,
// releases it.
func hold(t testing.TB, faults *gputest.Faults, st *gpu.Stream) func() {
	t.Helper()
	release, err := faults.Hold(st)
	require.NoError(t, err)
	t.Cleanup(release) // before the device closes: cleanups run last first
	return release
}

// eventsLeft returns how many driver events the device holds.
func eventsLeft(faults *gputest.Faults) int {
	_, events, _ := faults.Handles()
	return events
}

// queued is an evictable scope s on a held stream st, whose buffer b has a
// memset of 3s queued behind the hold, and a device full with it.
type queued struct {
	dev     *gpu.Device
	faults  *gputest.Faults
	st      *gpu.Stream
	s       *gpu.Scope
	b       gpu.Buffer
	release func()
}

// queueOnItsStream makes a queued scope, and checks that an allocation
// that needs its room fails rather than evict it.
func queueOnItsStream(t *testing.T) queued {
	t.Helper()
	var q queued
	q.dev, q.faults = openFaultyHost(t, 2*slotSize)
	q.st = streamOf(t, q.dev)
	q.s, q.b = load(t, q.dev, 1, gpu.Evictable(0), gpu.OnStream(q.st))
	load(t, q.dev, 2)
	q.release = hold(t, q.faults, q.st)
	require.NoError(t, q.b.Memset(3)) // queued behind the hold
	notEvicted(t, q.dev, q.s)
	return q
}

// notEvicted checks that s, the device's only evictable scope, is busy:
// an eviction pass leaves it, and an allocation that needs its room fails.
// The pass comes first: an allocation that evicted it would wait for the
// held work before reusing its memory on another stream.
func notEvicted(t *testing.T, dev *gpu.Device, s *gpu.Scope) {
	t.Helper()
	require.False(t, gpu.EvictOne(dev, slotSize), "a scope with stream work queued on its buffers is busy")
	require.ErrorIs(t, allocElsewhere(t, dev), gpu.ErrOutOfMemory)
	assert.False(t, evicted(s))
}

// keptUntilDone checks that s, whose work queued on st waits for release,
// is not evicted until that work has completed, and is then.
func keptUntilDone(t *testing.T, dev *gpu.Device, s *gpu.Scope, st *gpu.Stream, release func()) {
	t.Helper()
	notEvicted(t, dev, s)
	release()
	require.NoError(t, st.Synchronize())
	require.NoError(t, allocElsewhere(t, dev), "idle once its work completed")
	assert.True(t, evicted(s))
}

func TestAScopeWithStreamWorkQueuedIsNotEvicted(t *testing.T) {
	t.Run("work on its own stream keeps it until the work completes", func(t *testing.T) {
		q := queueOnItsStream(t)
		dev, faults, st, s, b := q.dev, q.faults, q.st, q.s, q.b
		q.release()
		require.NoError(t, st.Synchronize())
		holds(t, b, 3)
		require.NoError(t, allocElsewhere(t, dev), "idle once its work completed")
		assert.True(t, evicted(s))
		assert.Zero(t, eventsLeft(faults), "the checks leave no event behind")
	})
	t.Run("work on another stream that used its buffer keeps it", func(t *testing.T) {
		dev, faults := openFaultyHost(t, 2*slotSize)
		st := streamOf(t, dev)
		s, b := load(t, dev, 1, gpu.Evictable(0))
		load(t, dev, 2)
		release := hold(t, faults, st)
		require.NoError(t, b.RecordUse(st))
		require.NoError(t, b.Use(func(uintptr) error {
			return faults.Enqueue(st, func() error { return nil }) // a kernel that reads it
		}))
		keptUntilDone(t, dev, s, st, release)
	})
	t.Run("work a child queued on a buffer it kept keeps the parent", func(t *testing.T) {
		dev, faults := openFaultyHost(t, 2*slotSize)
		st := streamOf(t, dev)
		parent, err := dev.NewScope(gpu.Evictable(0))
		require.NoError(t, err)
		defer parent.Close()
		load(t, dev, 2)
		release := hold(t, faults, st)
		require.NoError(t, gpu.WithScope(parent.Context(), dev, func(child *gpu.Scope) error {
			b, err := child.Alloc(slotSize)
			if err != nil {
				return err
			}
			if err := b.Memset(3); err != nil { // queued on the child's stream
				return err
			}
			return child.Keep(b)
		}, gpu.OnStream(st)))
		keptUntilDone(t, dev, parent, st, release)
	})
	t.Run("work on a stream it made keeps it, and evicting never waits for it", func(t *testing.T) {
		dev, faults := openFaultyHost(t, 2*slotSize)
		s, _ := load(t, dev, 1, gpu.Evictable(0))
		st, err := s.NewStream()
		require.NoError(t, err)
		load(t, dev, 2)
		release := hold(t, faults, st)
		require.NoError(t, faults.Enqueue(st, func() error { return nil }))
		keptUntilDone(t, dev, s, st, release)
		assert.Zero(t, eventsLeft(faults))
	})
	t.Run("work others queue after its own does not keep it once its own completed", func(t *testing.T) {
		q := queueOnItsStream(t)
		dev, faults, st, s := q.dev, q.faults, q.st, q.s
		q.release()
		ran := make(chan struct{})
		require.NoError(t, faults.Enqueue(st, func() error { close(ran); return nil }))
		<-ran               // the memset ran before it
		hold(t, faults, st) // others' work, queued after the scope's last use
		// On st, where the evicted memory is reused at once in the
		// stream's order; another stream would wait for st's work.
		require.NoError(t, allocElsewhere(t, dev, gpu.OnStream(st)))
		assert.True(t, evicted(s))
	})
	t.Run("a use while the device asks the driver keeps it", func(t *testing.T) {
		dev, faults := openFaultyHost(t, 2*slotSize)
		s, b := load(t, dev, 1, gpu.Evictable(0))
		load(t, dev, 2)
		used := false
		faults.FailWhen(func(c gputest.Call) bool {
			if c.Method == "RecordEvent" && !used { // the check of s's streams
				used = true
				require.NoError(t, b.Use(func(uintptr) error { return nil }))
			}
			return false
		})
		assert.False(t, gpu.EvictOne(dev, slotSize), "s was used after its streams were asked about")
		assert.False(t, evicted(s))
		faults.FailWhen(nil)
		assert.True(t, gpu.EvictOne(dev, slotSize))
		assert.True(t, evicted(s))
	})
}

func TestAScopeWithStreamWorkDoneIsEvictedOnTheHostDevice(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(2*slotSize))
	owner, err := dev.NewScope()
	require.NoError(t, err)
	defer owner.Close()
	st, err := owner.NewStream()
	require.NoError(t, err)
	s, b := load(t, dev, 1, gpu.Evictable(0), gpu.OnStream(st))
	load(t, dev, 2)
	require.NoError(t, b.Memset(3)) // queued on the stream's goroutine
	require.NoError(t, st.Synchronize())
	require.NoError(t, gpu.WithScope(t.Context(), dev, func(in *gpu.Scope) error {
		_, err := in.Alloc(slotSize)
		return err
	}))
	assert.True(t, evicted(s))
}

func TestAScopeWhoseAllocationIsInFlightIsNotEvicted(t *testing.T) {
	dev, faults := openFaultyHost(t, 3*slotSize)
	st := streamOf(t, dev)
	a, ab := load(t, dev, 1, gpu.Evictable(0), gpu.Name("loading"))
	load(t, dev, 2)
	// A freed buffer held for work queued on st behind a hold: the only
	// room left, and a's next allocation waits in the driver for it.
	q, err := dev.NewScope()
	require.NoError(t, err)
	defer q.Close()
	x, err := q.Alloc(slotSize)
	require.NoError(t, err)
	require.NoError(t, x.RecordUse(st))
	release := hold(t, faults, st)
	require.NoError(t, q.Free(x))

	waiting := make(chan struct{}, 1)
	faults.FailWhen(func(c gputest.Call) bool {
		if c.Method == "EventDone" { // a's allocation asks whether x is free
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
		return false
	})
	ctx := a.Context() // asked now: Context waits for the scope's lock, which the allocation holds
	allocated := make(chan error, 1)
	go func() {
		_, err := a.Alloc(slotSize)
		allocated <- err
	}()
	<-waiting
	// a's allocation is under way: an eviction pass leaves a, the only
	// evictable scope, and returns without waiting for it.
	assert.False(t, gpu.EvictOne(dev, slotSize))
	assert.NoError(t, context.Cause(ctx), "a is not evicted")
	other := make(chan error, 1)
	go func() { other <- allocElsewhere(t, dev) }()
	release()
	// Whichever gets the freed buffer first succeeds; the other fails
	// with a plain out-of-memory error, or, for the other allocation,
	// evicts a once a's allocation has ended.
	errA, errOther := <-allocated, <-other
	for _, err := range []error{errA, errOther} {
		if err != nil {
			require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		}
	}
	assert.True(t, errA == nil || errOther == nil, "the freed buffer served one of them")
	if evicted(a) {
		assert.NoError(t, errA, "a was evicted only after its allocation ended")
		assert.NoError(t, errOther)
	} else {
		holds(t, ab, 1)
	}
	faults.FailWhen(nil)
}

func TestConcurrentEvictionChecksEvictOnceAndLeaveNoEventBehind(t *testing.T) {
	q := queueOnItsStream(t)
	ctx := q.s.Context()
	var evictions atomic.Int64
	var started, wg sync.WaitGroup
	for range 8 {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			for context.Cause(ctx) == nil { // busy until the release below
				if gpu.EvictOne(q.dev, slotSize) {
					evictions.Add(1)
				}
			}
		})
	}
	started.Wait()
	q.release()
	wg.Wait()
	assert.Equal(t, int64(1), evictions.Load())
	assert.Equal(t, int64(1), q.dev.Stats().Evictions)
	require.NoError(t, q.st.Synchronize())
	assert.Zero(t, eventsLeft(q.faults), "every event a check recorded is destroyed")
}

func TestTheEventsOfABusyScopeEndedByItsParentAreDestroyed(t *testing.T) {
	dev, faults := openFaultyHost(t, 2*slotSize)
	st := streamOf(t, dev)
	parent, err := dev.NewScope()
	require.NoError(t, err)
	release := hold(t, faults, st)
	queued, finish, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- gpu.WithScope(parent.Context(), dev, func(s *gpu.Scope) error {
			b, err := s.Alloc(slotSize)
			if err == nil {
				err = b.Memset(1) // behind the hold
			}
			close(queued)
			<-finish
			return err
		}, gpu.Evictable(0), gpu.OnStream(st))
	}()
	<-queued
	require.False(t, gpu.EvictOne(dev, slotSize), "busy: the check keeps an event pending")
	require.Equal(t, 1, eventsLeft(faults))
	require.NoError(t, parent.Close()) // ends the child while its function runs
	other, err := dev.NewScope(gpu.Evictable(0))
	require.NoError(t, err)
	assert.Zero(t, eventsLeft(faults), "an evictable scope that ended without its own end is forgotten, its events destroyed")
	require.NoError(t, other.Close())
	release()
	close(finish)
	require.NoError(t, <-done)
}
