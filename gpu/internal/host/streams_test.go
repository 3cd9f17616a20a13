package host_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/gpu/internal/host"
	"github.com/gpuscope/gpuscope/pool"
)

// newDriver returns a host driver with its test controls (Hold, Enqueue,
// Used), closed when the test ends.
func newDriver(t *testing.T, capacity int64) *host.Driver {
	t.Helper()
	d, err := host.New(capacity)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Close()) })
	return d
}

func TestStreamWorkRunsInOrderAfterWhatIsQueued(t *testing.T) {
	d := newDriver(t, 1<<20)
	s, err := d.NewStream()
	require.NoError(t, err)
	ptr, err := d.Alloc(4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.Free(ptr, 4096)) }()
	require.NoError(t, d.Memset(ptr, 1, 4096, 0))

	release, err := d.Hold(s)
	require.NoError(t, err)
	require.NoError(t, d.Memset(ptr, 7, 4096, s), "returns at once: the stream is held")
	got := make([]byte, 1)
	require.NoError(t, d.CopyDtoH(got, ptr, 0), "the default stream does not wait for s")
	assert.Equal(t, byte(1), got[0], "s's memset has not run")

	ev, err := d.RecordEvent(s)
	require.NoError(t, err)
	done, err := d.EventDone(ev)
	require.NoError(t, err)
	assert.False(t, done, "the event waits for the held work")

	var order []int
	require.NoError(t, d.Enqueue(s, func() error { order = append(order, 1); return nil }))
	waited := make(chan []byte)
	go func() {
		b := make([]byte, 1)
		assert.NoError(t, d.CopyDtoH(b, ptr, s)) // queued after the memset
		order = append(order, 2)
		waited <- b
	}()
	release()
	assert.Equal(t, byte(7), (<-waited)[0], "a copy on s sees the memset queued before it")
	assert.Equal(t, []int{1, 2}, order)
	require.NoError(t, d.WaitEvent(ev))
	done, err = d.EventDone(ev)
	require.NoError(t, err)
	assert.True(t, done)
	require.NoError(t, d.DestroyEvent(ev))
	require.NoError(t, d.Synchronize(s))
	require.NoError(t, d.DestroyStream(s))
	assert.Error(t, d.Synchronize(s), "a destroyed stream is gone")
}

func TestWaitEventReturnsOnlyAfterTheHeldWork(t *testing.T) {
	d := newDriver(t, 1<<20)
	s, err := d.NewStream()
	require.NoError(t, err)
	release, err := d.Hold(s)
	require.NoError(t, err)
	var ran atomic.Bool
	require.NoError(t, d.Enqueue(s, func() error { ran.Store(true); return nil }))
	ev, err := d.RecordEvent(s)
	require.NoError(t, err)
	waited := make(chan bool)
	go func() {
		assert.NoError(t, d.WaitEvent(ev))
		waited <- ran.Load()
	}()
	release()
	assert.True(t, <-waited, "WaitEvent returned after the work queued before the event")
	require.NoError(t, d.DestroyStream(s))
}

func TestAsynchronousErrorsAreReportedBySynchronize(t *testing.T) {
	d := newDriver(t, 1<<20)
	s, err := d.NewStream()
	require.NoError(t, err)
	require.NoError(t, d.Memset(0xdead0000, 0, 16, s), "queued: the error comes later")
	assert.ErrorContains(t, d.Synchronize(s), "not device memory")
	assert.NoError(t, d.Synchronize(s), "reported once")
	require.NoError(t, d.Memset(0xdead0000, 0, 16, s))
	assert.Error(t, d.DestroyStream(s), "or by the stream's end")
	_, err = d.Hold(0)
	assert.Error(t, err, "the default stream cannot be held")
	assert.Error(t, d.Enqueue(12345, func() error { return nil }), "no such stream")
}

func TestCloseEndsEveryStream(t *testing.T) {
	d, err := host.New(1 << 20)
	require.NoError(t, err)
	var ran atomic.Int32
	for range 3 {
		s, err := d.NewStream()
		require.NoError(t, err)
		for range 10 {
			require.NoError(t, d.Enqueue(s, func() error { ran.Add(1); return nil }))
		}
	}
	require.NoError(t, d.Close())
	assert.Equal(t, int32(30), ran.Load(), "queued work ran before Close returned")
	_, err = d.NewStream()
	assert.ErrorIs(t, err, driver.ErrClosed)
	// goleak, in TestMain, checks that no stream goroutine is left.
}

// The pool's stream rules on the host device: a block that stream a may
// still be using is not handed to stream b until a has passed the point
// where the block was freed.
func TestPoolDoesNotHandAHeldStreamsBlockToAnother(t *testing.T) {
	const size = 20 << 20 // one classic segment: the device holds nothing else
	t.Run("used on a through RecordUse", func(t *testing.T) {
		d := newDriver(t, size) // room for one block: every reuse is forced
		p, err := pool.New(d, pool.Expand(pool.ExpandNever))
		require.NoError(t, err)
		a, err := d.NewStream()
		require.NoError(t, err)
		b, err := d.NewStream()
		require.NoError(t, err)
		x, err := p.AllocContext(context.Background(), size, b)
		require.NoError(t, err)
		require.NoError(t, p.RecordUse(x, a))
		release, err := d.Hold(a)
		require.NoError(t, err)
		require.NoError(t, p.Free(x))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = p.AllocContext(ctx, size, b)
		require.ErrorIs(t, err, pool.ErrOutOfMemory, "x's memory is the only memory, and a may still use it")
		release()
		y, err := p.AllocContext(context.Background(), size, b)
		require.NoError(t, err, "once a passed the free, x's memory serves b")
		assert.Equal(t, x.Ptr(), y.Ptr())
		require.NoError(t, p.Free(y))
		require.NoError(t, p.Close(), "the pool first: it waits on its streams")
		require.NoError(t, d.DestroyStream(a))
		require.NoError(t, d.DestroyStream(b))
	})
	t.Run("freed on a, wanted by b at full capacity", func(t *testing.T) {
		d := newDriver(t, size)
		p, err := pool.New(d, pool.Expand(pool.ExpandNever))
		require.NoError(t, err)
		a, err := d.NewStream()
		require.NoError(t, err)
		b, err := d.NewStream()
		require.NoError(t, err)
		x, err := p.AllocContext(context.Background(), size, a)
		require.NoError(t, err)
		release, err := d.Hold(a)
		require.NoError(t, err)
		require.NoError(t, d.Memset(x.Ptr(), 9, size, a)) // a's work on x, still queued
		require.NoError(t, p.Free(x))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = p.AllocContext(ctx, size, b)
		require.ErrorIs(t, err, pool.ErrOutOfMemory, "b must not get x's memory while a's memset is queued")
		release()
		y, err := p.AllocContext(context.Background(), size, b)
		require.NoError(t, err, "once a is released its memory serves b")
		assert.Equal(t, int64(1), p.Stats().Segments, "the device holds one segment: a's, given to b")
		require.NoError(t, p.Free(y))
		require.NoError(t, p.Close())
		require.NoError(t, d.DestroyStream(a))
		require.NoError(t, d.DestroyStream(b))
	})
}

func TestARetiredStreamLeavesThePoolWorking(t *testing.T) {
	d := newDriver(t, 64<<20)
	p, err := pool.New(d, pool.Expand(pool.ExpandNever))
	require.NoError(t, err)
	s, err := d.NewStream()
	require.NoError(t, err)
	cached, err := p.AllocContext(context.Background(), 1<<20, s)
	require.NoError(t, err)
	kept, err := p.AllocContext(context.Background(), 4<<20, s) // outlives the stream, as a buffer a parent kept
	require.NoError(t, err)
	used, err := p.Alloc(1 << 20)
	require.NoError(t, err)
	require.NoError(t, p.RecordUse(used, s))
	release, err := d.Hold(s)
	require.NoError(t, err)
	require.NoError(t, p.Free(cached))
	require.NoError(t, p.Free(used)) // parked until s passes its event

	retired := make(chan error)
	go func() { retired <- p.RetireStream(s) }()
	release()
	require.NoError(t, <-retired, "RetireStream waits for s's work")
	require.NoError(t, d.DestroyStream(s))

	_, err = p.AllocContext(context.Background(), 64, s)
	assert.Error(t, err, "no new memory on a retired stream")
	other, err := p.Alloc(64)
	require.NoError(t, err)
	assert.Error(t, p.RecordUse(other, s), "no use on a retired stream")
	require.NoError(t, p.Free(other))
	require.NoError(t, p.Free(kept), "a block of the stream is freed after it is gone")
	require.NoError(t, p.EmptyCache(), "no event is recorded on the destroyed stream")
	assert.Zero(t, p.Stats().Reserved)
	require.NoError(t, p.Close())
	assert.Zero(t, d.Used())
	assert.Error(t, p.RetireStream(0))
}

func TestAStreamDestroyedWithoutRetiringGivesItsMemoryBack(t *testing.T) {
	d := newDriver(t, 64<<20)
	p, err := pool.New(d)
	require.NoError(t, err)
	st, err := d.NewStream()
	require.NoError(t, err)
	for _, n := range []int64{4096, 8 << 20} {
		b, err := p.AllocContext(context.Background(), n, st)
		require.NoError(t, err)
		require.NoError(t, p.Free(b))
	}
	require.NoError(t, d.DestroyStream(st)) // the "deleted stream" case: no RetireStream
	require.NoError(t, p.EmptyCache())
	assert.Zero(t, p.Stats().Reserved, "everything went back")
	require.NoError(t, p.Close())
	assert.Zero(t, d.Used())
}

// A handle the driver did not make gets a stream of its own, the same one
// each time, that events and synchronization work on and that only Close
// ends; the driver's own streams and 0 are themselves.
func TestAdoptStreamMakesAStreamForAHandleItDoesNotKnow(t *testing.T) {
	d, err := host.New(1 << 20)
	require.NoError(t, err)
	id, err := d.AdoptStream(0x5000)
	require.NoError(t, err)
	again, err := d.AdoptStream(0x5000)
	require.NoError(t, err)
	assert.Equal(t, id, again, "the same handle, the same stream")
	ev, err := d.RecordEvent(id)
	require.NoError(t, err, "the adopted stream exists")
	require.NoError(t, d.DestroyEvent(ev))
	require.NoError(t, d.Synchronize(id))
	assert.Error(t, d.DestroyStream(id), "its maker's to destroy")

	own, err := d.NewStream()
	require.NoError(t, err)
	got, err := d.AdoptStream(own)
	require.NoError(t, err)
	assert.Equal(t, own, got, "the driver's own stream is itself")
	got, err = d.AdoptStream(0)
	require.NoError(t, err)
	assert.Zero(t, got)
	require.NoError(t, d.DestroyStream(own))

	require.NoError(t, d.Close())
	_, err = d.AdoptStream(0x6000)
	assert.ErrorIs(t, err, driver.ErrClosed)
}
