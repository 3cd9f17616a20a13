package gpu_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/pool"
)

// A waiting allocation wakes whenever it could go on, not only when memory
// is freed. Each test lets a WaitForMemory request fail once
// (OnOutOfMemory tells it has: it waits from then on), then makes room
// without freeing memory, and the request must succeed. Before the fixes
// the requests waited until their deadline (a bound for the test, not a
// measure: they fail at once when it passes) and failed out of memory.

// waitingRequest runs a WaitForMemory request of size bytes in a new scope
// of ctx (opts added) and returns its error on the channel; attempts says
// each failed attempt (the device's OnOutOfMemory must send on it).
func waitingRequest(t *testing.T, ctx context.Context, dev *gpu.Device, size int64, opts ...gpu.ScopeOption) <-chan error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(size)
			return err
		}, append(opts, gpu.WaitForMemory(), gpu.Name("request"))...)
	}()
	return done
}

// failed returns an OnOutOfMemory option that tells attempts of each
// failure, without blocking.
func failed(attempts chan<- struct{}) gpu.DeviceOption {
	return gpu.OnOutOfMemory(func(error) {
		select {
		case attempts <- struct{}{}:
		default:
		}
	})
}

func TestAWaiterWakesWhenTheCapIsRaisedOrRemoved(t *testing.T) {
	for _, c := range []struct {
		name  string
		raise func(*gpu.Device) error
	}{
		{"SetMaxReserved(0)", func(d *gpu.Device) error { return d.SetMaxReserved(0) }},
		{"SetMaxReserved higher", func(d *gpu.Device) error { return d.SetMaxReserved(48 << 20) }},
		{"SetMaxReservedFraction(1)", func(d *gpu.Device) error { return d.SetMaxReservedFraction(1) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			attempts := make(chan struct{}, 1)
			dev := openHost(t, gpu.HostMemory(64<<20), gpu.MaxReserved(24<<20), failed(attempts))
			hog, err := dev.NewScope()
			require.NoError(t, err)
			defer hog.Close()
			_, err = hog.Alloc(16 << 20)
			require.NoError(t, err)
			done := waitingRequest(t, context.Background(), dev, 16<<20) // fits the cap, not beside hog
			<-attempts
			require.NoError(t, c.raise(dev))
			require.NoError(t, <-done, "the request went on under the higher cap")
		})
	}
}

func TestAWaiterWakesWhenALimitsHoldersShrink(t *testing.T) {
	attempts := make(chan struct{}, 1)
	dev := openHost(t, failed(attempts))
	err := gpu.WithScope(context.Background(), dev, func(parent *gpu.Scope) error {
		return gpu.WithScope(parent.Context(), dev, func(limited *gpu.Scope) error {
			b, err := limited.Alloc(3 << 10)
			require.NoError(t, err)
			done := waitingRequest(t, limited.Context(), dev, 2<<10) // past the limit beside b
			<-attempts
			require.NoError(t, limited.Keep(b)) // b moves to parent: the limit has room, no memory went back
			return <-done
		}, gpu.Limit(4<<10))
	})
	require.NoError(t, err, "the request went on once the limited scope held less")
}

func TestAWaiterWakesWhenABusyEvictableScopeTurnsIdle(t *testing.T) {
	attempts := make(chan struct{}, 1)
	dev := openHost(t, gpu.HostMemory(16<<20), failed(attempts))
	cache, err := dev.NewScope(gpu.Evictable(0), gpu.Name("cache"))
	require.NoError(t, err)
	defer cache.Close()
	b, err := cache.Alloc(12 << 20)
	require.NoError(t, err)
	var done <-chan error
	require.NoError(t, b.Use(func(uintptr) error { // busy while this runs
		done = waitingRequest(t, context.Background(), dev, 12<<20)
		<-attempts // it found no idle scope to evict, and waits
		return nil
	}))
	require.NoError(t, <-done, "the request evicted the cache once it was idle")
	_, err = cache.Alloc(1)
	assert.ErrorIs(t, err, gpu.ErrEvicted, "it was evicted")
}

func TestAWaiterWakesAfterEmptyCache(t *testing.T) {
	attempts := make(chan struct{}, 1)
	// Whole segments: the request's stream cannot take over the cached pages.
	dev, faults := openFaultyHost(t, 64<<20, failed(attempts), gpu.PoolOptions(pool.Expand(pool.ExpandNever)))
	st := streamOf(t, dev)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(40 << 20)
		return err
	})) // 40 MiB cached for the default stream
	faults.FailNth(gputest.OpFree, 1) // the request's own release of the cache fails
	done := waitingRequest(t, context.Background(), dev, 40<<20, gpu.OnStream(st))
	select {
	case <-attempts:
	case err := <-done:
		t.Fatalf("no wait: %v", err)
	}
	require.NoError(t, dev.EmptyCache())
	require.NoError(t, <-done, "the request took the room EmptyCache made")
}
