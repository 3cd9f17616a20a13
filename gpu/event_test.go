package gpu_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// liveEvents counts the events the scope named name owns on dev.
func liveEvents(t testing.TB, dev *gpu.Device, name string) int {
	t.Helper()
	snap, err := dev.Snapshot()
	require.NoError(t, err)
	n := 0
	for _, s := range snap.Scopes {
		for _, r := range s.Resources {
			if s.Name == name && r.Kind == "event" {
				n++
			}
		}
	}
	return n
}

// heapBytes is the bytes of live heap objects after a collection.
func heapBytes() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// The loop users write: a model scope owns a stream; each request opens a
// scope, records an event on the stream and waits for it, and never calls
// Release. Before, every event stayed with the model's scope (about 320
// bytes with stacks recorded, and a driver event, each) until the scope ended.
func TestTheRequestLoopOnALongLivedStreamStaysFlat(t *testing.T) {
	const requests = 100_000
	dev := testDevice(t, 0)
	model, err := dev.NewScope(gpu.Name("model"))
	require.NoError(t, err)
	defer func() { require.NoError(t, model.Close()) }()
	st, err := model.NewStream()
	require.NoError(t, err)
	ctx := context.Background()
	request := func(s *gpu.Scope) error {
		ev, err := st.Record()
		if err != nil {
			return err
		}
		return ev.Wait()
	}
	for range 1000 { // warm-up: the pool's and the scope tree's caches
		require.NoError(t, gpu.WithScope(ctx, dev, request, gpu.Name("request")))
	}
	before := heapBytes()
	for i := range requests {
		if err := gpu.WithScope(ctx, dev, request, gpu.Name("request")); err != nil {
			require.NoError(t, err, "request %d", i)
		}
	}
	grew := heapBytes() - before
	t.Logf("heap grew by %d bytes over %d requests; the model scope owns %d events", grew, requests, liveEvents(t, dev, "model"))
	assert.Zero(t, liveEvents(t, dev, "model"), "a waited event holds nothing of its stream's scope")
	assert.Less(t, grew, int64(requests*8), "the heap grows by less than 8 bytes a request (it grew by 322 while events piled up)")
}

// An event nobody waits for gives its driver event back at a later Record
// that finds the stream past it, on the GPU as on the host.
func TestEventsTheStreamHasPassedAreGivenBackAtTheNextRecord(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		var first *gpu.Event
		for i := range 1000 {
			ev, err := st.Record()
			require.NoError(t, err)
			if i == 0 {
				first = ev
			}
		}
		require.NoError(t, st.Synchronize())
		last, err := st.Record()
		require.NoError(t, err)
		assert.Equal(t, 1, liveEvents(t, dev, s.Path()), "only the last event, which nothing has seen done yet")
		done, err := first.Done()
		require.NoError(t, err)
		assert.True(t, done, "an event given back still answers while its scope is open")
		require.NoError(t, first.Wait())
		require.NoError(t, last.Wait())
		assert.Zero(t, liveEvents(t, dev, s.Path()))
		return nil
	}, gpu.Name("forget")))
}

func TestADoneEventHoldsNoDriverEvent(t *testing.T) {
	dev, drv := openTestHost(t)
	model, err := dev.NewScope(gpu.Name("model"))
	require.NoError(t, err)
	st, err := model.NewStream()
	require.NoError(t, err)
	for range 100 {
		ev, err := st.Record()
		require.NoError(t, err)
		require.NoError(t, ev.Wait())
	}
	polled, err := st.Record()
	require.NoError(t, err)
	for done := false; !done; {
		done, err = polled.Done()
		require.NoError(t, err)
	}
	_, events, _ := drv.Handles()
	t.Logf("after 101 events, 100 waited for and 1 polled until done, the driver holds %d events", events)
	assert.Zero(t, events, "waited and polled events gave their driver events back")
	require.NoError(t, model.Close())
	_, err = polled.Done()
	assert.ErrorIs(t, err, gpu.ErrScopeClosed, "a done event ends with its stream's scope")
	assert.ErrorIs(t, polled.Wait(), gpu.ErrScopeClosed)
	assert.NoError(t, polled.Release(), "Release after the scope ended does nothing")
	_, events, _ = drv.Handles()
	assert.Zero(t, events)
}

func TestAnEventNotDoneStaysWithItsScope(t *testing.T) {
	dev, drv := openTestHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, release := heldStream(t, drv, s)
		defer release()
		pending := make([]*gpu.Event, 3)
		for i := range pending {
			var err error
			pending[i], err = st.Record()
			require.NoError(t, err)
		}
		done, err := pending[0].Done()
		require.NoError(t, err)
		assert.False(t, done)
		assert.Equal(t, 3, liveEvents(t, dev, "held"), "the stream has passed none of them")
		require.NoError(t, pending[1].Release())
		_, err = pending[1].Done()
		assert.ErrorIs(t, err, gpu.ErrScopeClosed, "a released event fails")
		release()
		require.NoError(t, pending[2].Wait())
		assert.Equal(t, 1, liveEvents(t, dev, "held"), "the first is not seen done yet")
		return nil
	}, gpu.Name("held")))
}

// Many goroutines record, poll, wait and release on one stream while
// another ends its scope: every call returns nil or ErrScopeClosed, and
// nothing is left (the race detector and TestMain's leak check watch).
func TestEventsOfOneStreamUsedAtOnce(t *testing.T) {
	dev := testDevice(t, 0)
	s, err := dev.NewScope(gpu.Name("shared"))
	require.NoError(t, err)
	st, err := s.NewStream()
	require.NoError(t, err)
	var wg, halfway sync.WaitGroup
	halfway.Add(8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				if i == 250 {
					halfway.Done()
				}
				ev, err := st.Record()
				if err != nil {
					assert.ErrorIs(t, err, gpu.ErrScopeClosed)
					return
				}
				switch (g + i) % 3 {
				case 0:
					err = ev.Wait()
				case 1:
					_, err = ev.Done()
				default:
					err = ev.Release()
				}
				if err != nil {
					assert.ErrorIs(t, err, gpu.ErrScopeClosed)
				}
			}
		})
	}
	halfway.Wait()
	require.NoError(t, s.Close())
	wg.Wait()
}

// BenchmarkRecordWait records an event on a long-lived stream and waits for
// it, without Release: the request loop's cost per request. held/op is the
// events its stream's scope still owns at the end, per iteration.
func BenchmarkRecordWait(b *testing.B) {
	gpu.RecordStacks(false) // TestMain records stacks; this measures without
	defer gpu.RecordStacks(true)
	dev := openHost(b)
	model, err := dev.NewScope(gpu.Name("model"))
	if err != nil {
		b.Fatal(err)
	}
	defer model.Close()
	st, err := model.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		ev, err := st.Record()
		if err != nil {
			b.Fatal(err)
		}
		if err := ev.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(liveEvents(b, dev, "model"))/float64(b.N), "held/op")
}
