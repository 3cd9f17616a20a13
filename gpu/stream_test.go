package gpu_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/internal/registry"
)

func TestAScopesStreamEndsAfterItsWorkAndBeforeItsMemory(t *testing.T) {
	dev, drv := openTestHost(t, gpu.ScrubFreed()) // released memory reads as zeros
	var st *gpu.Stream
	var ran atomic.Bool
	seen := make([]byte, 4096)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		var err error
		if st, err = s.NewStream(); err != nil {
			return err
		}
		b, err := s.Alloc(4096)
		require.NoError(t, err)
		require.NoError(t, b.Memset(7))
		ptr := b.Ptr()
		release, err := drv.Hold(st)
		require.NoError(t, err)
		// Work queued on the stream that reads the buffer once the stream
		// runs again: the scope must not release the memory under it.
		require.NoError(t, drv.Enqueue(st, func() error {
			ran.Store(true)
			return dev.Driver().CopyDtoH(seen, ptr, 0)
		}))
		go release() // while, or after, the scope ends
		return nil
	})
	require.NoError(t, err)
	assert.True(t, ran.Load(), "the scope ended after the stream's work")
	assert.Equal(t, bytes.Repeat([]byte{7}, 4096), seen, "the work read the buffer, not freed memory")
	assert.ErrorIs(t, st.Synchronize(), gpu.ErrScopeClosed)
	assert.Zero(t, dev.Stats().Allocated)
	require.NoError(t, dev.EmptyCache(), "the pool no longer waits on the destroyed stream")
}

func TestStreamsOfChildrenAndClosedDevicesEnd(t *testing.T) {
	dev := openHost(t)
	parent, err := dev.NewScope()
	require.NoError(t, err)
	var child *gpu.Stream
	require.NoError(t, gpu.WithScope(parent.Context(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		if err != nil {
			return err
		}
		require.NoError(t, st.Synchronize())
		child = st
		return nil
	}))
	assert.ErrorIs(t, child.Synchronize(), gpu.ErrScopeClosed, "the child's stream ended with it")
	kept, err := parent.NewStream()
	require.NoError(t, err)
	require.NoError(t, parent.Close())
	assert.ErrorIs(t, kept.Synchronize(), gpu.ErrScopeClosed)
	_, err = parent.NewStream()
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	var nilScope *gpu.Scope
	_, err = nilScope.NewStream()
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	var nilStream *gpu.Stream
	assert.ErrorIs(t, nilStream.Synchronize(), gpu.ErrScopeClosed)

	other := openHost(t)
	s, err := other.NewScope()
	require.NoError(t, err)
	st, err := s.NewStream()
	require.NoError(t, err)
	assert.ErrorContains(t, other.Close(), "1 scope open", "closing the device ends the scope, and says so")
	assert.Len(t, registry.TakeForcedCloses[gpu.ScopeSnapshot](), 1)
	assert.ErrorIs(t, st.Synchronize(), gpu.ErrScopeClosed, "and its stream")
}

func TestAScopeOnAStreamOrdersItsWorkThere(t *testing.T) {
	dev, drv := openTestHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(parent *gpu.Scope) error {
		st, err := parent.NewStream()
		require.NoError(t, err)
		release, err := drv.Hold(st)
		require.NoError(t, err)
		var b gpu.Buffer
		err = gpu.WithScope(parent.Context(), dev, func(s *gpu.Scope) error {
			var err error
			if b, err = s.Alloc(4096); err != nil {
				return err
			}
			require.NoError(t, b.Memset(5), "queued on st, which is held")
			now := make([]byte, 1)
			require.NoError(t, dev.Driver().CopyDtoH(now, b.Ptr(), 0))
			assert.NotEqual(t, byte(5), now[0], "the memset waits behind st's held work")
			release()
			require.NoError(t, st.Synchronize())
			require.NoError(t, dev.Driver().CopyDtoH(now, b.Ptr(), 0))
			assert.Equal(t, byte(5), now[0], "and ran on st")
			return s.Keep(b)
		}, gpu.OnStream(st), gpu.Name("on st"))
		require.NoError(t, err)
		// The parent works on the default stream: a kept buffer's copies
		// go there now, and do not wait for st.
		release, err = drv.Hold(st)
		require.NoError(t, err)
		defer release()
		require.NoError(t, b.Memset(6))
		now := make([]byte, 1)
		require.NoError(t, dev.Driver().CopyDtoH(now, b.Ptr(), 0))
		assert.Equal(t, byte(6), now[0], "the kept buffer's memset ran at once, on the parent's stream")
		release()
		return nil
	}))
	assert.Zero(t, dev.Stats().Allocated)
}

func TestRecordUseKeepsAFreedBufferFromReuseUntilTheStreamPasses(t *testing.T) {
	dev, drv := openTestHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		b, err := s.Alloc(4096)
		require.NoError(t, err)
		require.NoError(t, b.RecordUse(st))
		release, err := drv.Hold(st)
		require.NoError(t, err)
		require.NoError(t, s.Free(b))
		pending := func() int {
			snap, err := dev.Snapshot()
			require.NoError(t, err)
			n := 0
			for _, seg := range snap.Pool.Segments {
				for _, blk := range seg.Blocks {
					if blk.State == "pending" {
						n++
					}
				}
			}
			return n
		}
		assert.Equal(t, 1, pending(), "b waits for st's event, not in the cache")
		release()
		require.NoError(t, st.Synchronize())
		require.NoError(t, dev.EmptyCache())
		assert.Zero(t, pending())
		assert.ErrorIs(t, b.RecordUse(st), gpu.ErrFreed)
		return nil
	}))
}

func TestOnStreamRefusesWhatItCannotMean(t *testing.T) {
	dev, other := openHost(t), openHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		err = gpu.WithScope(s.Context(), dev, func(*gpu.Scope) error { return nil }, gpu.OnStream(st), gpu.Reserve(1<<20))
		assert.ErrorContains(t, err, "cannot reserve")
		err = gpu.WithScope(context.Background(), other, func(*gpu.Scope) error { return nil }, gpu.OnStream(st))
		assert.ErrorIs(t, err, gpu.ErrWrongScope)
		err = gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }, gpu.OnStream(nil))
		assert.Error(t, err)
		b, err := s.Alloc(64)
		require.NoError(t, err)
		assert.ErrorIs(t, b.RecordUse(nil), gpu.ErrWrongScope)
		return nil
	}))
}

func TestEventsMarkAStreamsWork(t *testing.T) {
	dev, drv := openTestHost(t)
	var ev *gpu.Event
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		release, err := drv.Hold(st)
		require.NoError(t, err)
		var ran atomic.Bool
		require.NoError(t, drv.Enqueue(st, func() error { ran.Store(true); return nil }))
		ev, err = st.Record()
		require.NoError(t, err)
		done, err := ev.Done()
		require.NoError(t, err)
		assert.False(t, done, "the stream is held")
		waited := make(chan bool)
		go func() {
			assert.NoError(t, ev.Wait())
			waited <- ran.Load()
		}()
		release()
		assert.True(t, <-waited, "Wait returned after the work before the event")
		done, err = ev.Done()
		require.NoError(t, err)
		assert.True(t, done)
		return nil
	}))
	_, err := ev.Done()
	assert.ErrorIs(t, err, gpu.ErrScopeClosed, "the event ended with its stream")
	assert.ErrorIs(t, ev.Wait(), gpu.ErrScopeClosed)
}

func TestReservedMemoryStaysOnItsStream(t *testing.T) {
	dev := openHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		b, err := s.Alloc(4096) // from the scope's reservation
		require.NoError(t, err)
		assert.ErrorContains(t, b.RecordUse(st), "reservation", "a reservation cannot wait for another stream")
		return b.Memset(1) // and nothing changed
	}, gpu.Reserve(1<<20)))
}

func TestZeroStreamsEventsModulesAndFunctionsAreErrorsNotPanics(t *testing.T) {
	dev := openHost(t)
	var st gpu.Stream
	assert.ErrorIs(t, st.Synchronize(), gpu.ErrScopeClosed)
	_, err := st.Record()
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	var ev gpu.Event
	_, err = ev.Done()
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	assert.ErrorIs(t, ev.Wait(), gpu.ErrScopeClosed)
	var mod gpu.Module
	_, err = mod.Function("k")
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	var fn gpu.Function
	assert.ErrorIs(t, fn.Launch(gpu.Dim{X: 1}, gpu.Dim{X: 1}, 0, nil), gpu.ErrScopeClosed)
	err = gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }, gpu.OnStream(&gpu.Stream{}))
	assert.ErrorIs(t, err, gpu.ErrScopeClosed, "OnStream of a zero Stream")
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(512)
		require.NoError(t, err)
		assert.ErrorIs(t, b.RecordUse(&gpu.Stream{}), gpu.ErrWrongScope)
		return nil
	}))
}

func TestAChildInheritingAStreamCannotReserve(t *testing.T) {
	dev := openHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		return gpu.WithScope(s.Context(), dev, func(on *gpu.Scope) error {
			opened := false
			err := gpu.WithScope(on.Context(), dev, func(*gpu.Scope) error { opened = true; return nil }, gpu.Reserve(1<<20))
			assert.ErrorContains(t, err, "cannot reserve", "its reservation would return to the default stream under the stream's work")
			assert.False(t, opened)
			return nil
		}, gpu.OnStream(st))
	}))
	assert.Zero(t, dev.Stats().Allocated)
}

func TestReleasedEventsEndBeforeTheirStream(t *testing.T) {
	dev, drv := openTestHost(t)
	long, err := dev.NewScope(gpu.Name("server"))
	require.NoError(t, err)
	st, err := long.NewStream()
	require.NoError(t, err)
	for range 1000 {
		ev, err := st.Record()
		require.NoError(t, err)
		require.NoError(t, ev.Wait())
		require.NoError(t, ev.Release())
		require.NoError(t, ev.Release(), "Release is idempotent")
		assert.ErrorIs(t, ev.Wait(), gpu.ErrScopeClosed)
	}
	_, events, _ := drv.Handles()
	assert.Zero(t, events, "the released events are gone while the stream lives")
	kept, err := st.Record()
	require.NoError(t, err)
	require.NoError(t, long.Close())
	_, err = kept.Done()
	assert.ErrorIs(t, err, gpu.ErrScopeClosed, "one never released ends with the stream's scope")
	streams, events, _ := drv.Handles()
	assert.Zero(t, streams+events)
}

func TestABufferWhoseFreeCouldNotRecordAnEventIsHeldUntilTheStreamPasses(t *testing.T) {
	dev, drv := openTestHost(t)
	var failEvents atomic.Bool
	drv.FailWhen(func(c gputest.Call) bool { return c.Op == gputest.OpEvent && failEvents.Load() })
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		other, release := heldStream(t, drv, s)
		defer release()
		var ptr uintptr
		require.NoError(t, gpu.WithScope(s.Context(), dev, func(prev *gpu.Scope) error {
			b, err := prev.Alloc(4096)
			require.NoError(t, err)
			ptr = b.Ptr()
			require.NoError(t, b.RecordUse(other))
			require.NoError(t, dev.Driver().Memset(ptr, 0xAA, 4096, other.ID())) // still queued
			failEvents.Store(true)
			err = prev.Free(b)
			failEvents.Store(false)
			assert.ErrorContains(t, err, "held", "the failed event is reported")
			return nil
		}))
		require.NoError(t, gpu.WithScope(s.Context(), dev, func(next *gpu.Scope) error {
			b, err := next.Alloc(4096)
			require.NoError(t, err)
			assert.NotEqual(t, ptr, b.Ptr(), "the memory the other stream still writes is not handed out")
			return nil
		}))
		release()
		return other.Synchronize()
	}))
	require.NoError(t, dev.EmptyCache(), "once an event can be recorded and completes, the block goes back")
	assert.Zero(t, dev.Stats().Reserved)
}

func TestAStreamWhoseRetirementFailedStillLetsTheCacheEmpty(t *testing.T) {
	dev, drv := openTestHost(t)
	var failOnce, armed atomic.Bool
	drv.FailWhen(func(c gputest.Call) bool {
		return c.Op == gputest.OpEvent && armed.Load() && failOnce.CompareAndSwap(false, true)
	})
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		require.NoError(t, gpu.WithScope(s.Context(), dev, func(on *gpu.Scope) error {
			_, err := on.Alloc(8 << 20)
			return err
		}, gpu.OnStream(st)))
		armed.Store(true) // retiring the stream fails at the scope's end
		return nil
	})
	assert.ErrorIs(t, err, gputest.ErrInjected, "the failure is reported")
	require.True(t, failOnce.Load())
	require.NoError(t, dev.EmptyCache(), "the destroyed stream does not fail it")
	assert.Zero(t, dev.Stats().Reserved, "and its memory went back")
}

func TestAStreamPerRequestLeavesNoAddressSpaceBehind(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(64<<20))
	request := func() {
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			st, err := s.NewStream()
			require.NoError(t, err)
			return gpu.WithScope(s.Context(), dev, func(on *gpu.Scope) error {
				_, err := on.Alloc(1 << 20)
				return err
			}, gpu.OnStream(st))
		}))
	}
	request()
	segments := dev.Stats().Segments
	for range 50 {
		request()
	}
	assert.Equal(t, segments, dev.Stats().Segments, "each ended stream's arena gave its address space back")
	snap, err := dev.Snapshot()
	require.NoError(t, err)
	for _, s := range snap.Pool.Segments {
		assert.Zero(t, s.Stream, "only the default stream's arenas are left")
	}
}

// heldStream makes a stream of s on the faulty host device whose Faults
// are faults, held busy until release is called (gputest.Faults.Hold).
func heldStream(t *testing.T, faults *gputest.Faults, s *gpu.Scope) (st *gpu.Stream, release func()) {
	t.Helper()
	st, err := s.NewStream()
	require.NoError(t, err)
	release, err = faults.Hold(st)
	require.NoError(t, err)
	return st, release
}

// A stream other code made (a library's): a scope uses it, the pool waits
// for it before it reuses memory used there, and the scope's end leaves it
// to its maker.
func TestUseStreamLeavesTheStreamToItsMaker(t *testing.T) {
	dev, drv := openTestHost(t)
	maker, err := dev.NewScope(gpu.Name("library"))
	require.NoError(t, err)
	theirs, err := maker.NewStream()
	require.NoError(t, err)

	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.UseStream(theirs.ID())
		require.NoError(t, err)
		b, err := s.Alloc(4096)
		require.NoError(t, err)
		require.NoError(t, b.RecordUse(st))
		release, err := drv.Hold(theirs)
		require.NoError(t, err)
		ptr := b.Ptr()
		require.NoError(t, s.Free(b))
		again, err := s.Alloc(4096)
		require.NoError(t, err)
		assert.NotEqual(t, ptr, again.Ptr(), "reused while the library's stream may still use it")
		release()
		return nil
	}))
	require.NoError(t, theirs.Synchronize(), "the scope's end destroyed its maker's stream")
	require.NoError(t, maker.Close())
}

// A buffer of a scope on another stream that work on the default stream
// uses (PyTorch's record_stream onto it) waits for that stream too: its
// free records an event there, and where none can be recorded the buffer
// is held, where before UseStream(0) was refused and the use dropped.
func TestUseStreamOfTheDefaultStreamHoldsABufferOfAnotherStream(t *testing.T) {
	dev, faults, err := gputest.OpenFaulty(16 << 20)
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	maker, err := dev.NewScope()
	require.NoError(t, err)
	side, err := maker.NewStream()
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.OnStream(side))
	require.NoError(t, err)
	def, err := s.UseStream(0)
	require.NoError(t, err)
	assert.Zero(t, def.ID())

	b, err := s.Alloc(4096)
	require.NoError(t, err)
	require.NoError(t, b.RecordUse(def))
	ptr := b.Ptr()
	faults.FailWhen(func(c gputest.Call) bool { return c.Method == "RecordEvent" })
	assert.Error(t, s.Free(b), "no event on the default stream could be recorded")
	again, err := s.Alloc(4096)
	require.NoError(t, err)
	assert.NotEqual(t, ptr, again.Ptr(), "reused on its stream before the default stream's work")
	faults.FailWhen(nil)
	require.NoError(t, s.Free(again))
	require.NoError(t, s.Close())
	require.NoError(t, maker.Close())
	_, err = (*gpu.Scope)(nil).UseStream(1)
	require.ErrorIs(t, err, gpu.ErrScopeClosed)
}
