package gpu_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
)

// TestReservationOutlivingItsScopeIsReleased ends scopes with a
// reservation while goroutines still allocate from it: the reservation
// must go back to the device once the last allocation in flight is
// released, and no "bug" may be reported.
func TestReservationOutlivingItsScopeIsReleased(t *testing.T) {
	dev := testDevice(t, 0)
	for round := range 100 {
		var wg sync.WaitGroup
		err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			running := make(chan struct{}, 4)
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						b, err := s.Alloc(512)
						if err != nil {
							return // the scope has ended
						}
						if i == 8 {
							running <- struct{}{}
						}
						_ = s.Free(b)
					}
				}()
			}
			for range 4 {
				<-running
			}
			return nil // while they allocate
		}, gpu.Reserve(1<<20))
		wg.Wait()
		if err != nil {
			require.NotContains(t, err.Error(), "bug", "round %d", round)
		}
		require.Zero(t, dev.Stats().Allocated, "round %d: the reservation stayed allocated", round)
	}
}

// TestParentReservationClosedUnderItsChildren closes a long-lived scope
// with a reservation while children in other goroutines allocate from it.
func TestParentReservationClosedUnderItsChildren(t *testing.T) {
	dev := testDevice(t, 0)
	for round := range 50 {
		parent, err := dev.NewScope(gpu.Reserve(1<<20), gpu.Name("weights"))
		require.NoError(t, err)
		var wg sync.WaitGroup
		running := make(chan struct{}, 4)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					err := gpu.WithScope(parent.Context(), dev, func(s *gpu.Scope) error {
						_, err := s.Alloc(4096)
						return err
					})
					if err != nil {
						return // the parent has closed
					}
					if i == 8 {
						running <- struct{}{}
					}
				}
			}()
		}
		for range 4 {
			<-running
		}
		if err := parent.Close(); err != nil {
			require.NotContains(t, err.Error(), "bug", "round %d", round)
		}
		wg.Wait()
		require.Zero(t, dev.Stats().Allocated, "round %d: the reservation stayed allocated", round)
	}
}

func TestReservationFallback(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(outer *gpu.Scope) error {
		reserved := dev.Stats().Allocated
		assert.Equal(t, int64(1<<20), reserved, "the reservation is taken when the scope opens")
		return gpu.WithScope(outer.Context(), dev, func(in *gpu.Scope) error {
			a, err := in.Alloc(600 << 10)
			require.NoError(t, err)
			assert.Equal(t, reserved, dev.Stats().Allocated, "a child draws from its ancestor's reservation")
			b, err := in.Alloc(600 << 10)
			require.NoError(t, err)
			assert.Greater(t, dev.Stats().Allocated, reserved, "and falls back to the pool when it is full")
			aPtr := a.Ptr()
			require.NoError(t, in.Free(a))
			assert.Zero(t, a.Ptr(), "a freed buffer has no address")
			c, err := in.Alloc(500 << 10)
			require.NoError(t, err)
			assert.Equal(t, aPtr, c.Ptr(), "freed reservation space is reused")
			_ = b
			return nil
		})
	}, gpu.Reserve(1<<20))
	require.NoError(t, err)
	assert.Zero(t, dev.Stats().Allocated)
}

func TestKeepOutOfOwnReservationIsRefused(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(outer *gpu.Scope) error {
		return gpu.WithScope(outer.Context(), dev, func(in *gpu.Scope) error {
			b, err := in.Alloc(100)
			require.NoError(t, err)
			assert.Error(t, in.Keep(b), "its memory ends with the scope")
			return nil
		}, gpu.Reserve(4096))
	})
	require.NoError(t, err)
}

func TestReservationsOfAnySizeWork(t *testing.T) {
	dev := testDevice(t, 0)
	for _, n := range []int64{1, 406, 511, 513, 4097} {
		err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			assert.Equal(t, pool.Rounded(n), s.Stats().Reserved)
			b, err := s.Alloc(n)
			if err != nil {
				return err
			}
			return b.CopyFromHost(make([]byte, n))
		}, gpu.Reserve(n))
		require.NoError(t, err, "Reserve(%d)", n)
	}
}

func TestAReservationThatFindsNoRoomEvicts(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []gpu.DeviceOption
	}{
		{"for want of device memory", []gpu.DeviceOption{gpu.HostMemory(2 * slotSize)}},
		{"for the pool's cap", []gpu.DeviceOption{gpu.HostMemory(8 * slotSize), gpu.PoolOptions(pool.MaxReserved(2 * slotSize))}},
	} {
		t.Run("a reservation that fails "+c.name+" evicts an idle evictable scope", func(t *testing.T) {
			heard := 0
			dev := openHost(t, append(c.opts, gpu.OnOutOfMemory(func(error) { heard++ }))...)
			victim, _ := load(t, dev, 1, gpu.Evictable(0))
			load(t, dev, 2)
			s, err := dev.NewScope(gpu.Reserve(slotSize))
			require.NoError(t, err)
			defer s.Close()
			assert.True(t, evicted(victim))
			assert.Equal(t, int64(1), dev.Stats().Evictions)
			assert.Zero(t, heard, "OnOutOfMemory is not called where eviction made room")
		})
	}
	t.Run("a reservation never evicts a scope it opens in", func(t *testing.T) {
		heard := 0
		dev := openHost(t, gpu.HostMemory(2*slotSize), gpu.OnOutOfMemory(func(error) { heard++ }))
		parent, b := load(t, dev, 1, gpu.Evictable(0))
		load(t, dev, 2)
		err := gpu.WithScope(parent.Context(), dev, func(*gpu.Scope) error { return nil }, gpu.Reserve(slotSize))
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		assert.False(t, evicted(parent))
		holds(t, b, 1)
		assert.Equal(t, 1, heard, "OnOutOfMemory hears what eviction could not help")
	})
	t.Run("a reservation a Limit refuses evicts nothing", func(t *testing.T) {
		dev := openHost(t, gpu.HostMemory(4*slotSize))
		victim, _ := load(t, dev, 1, gpu.Evictable(0))
		load(t, dev, 2)
		limited := openLimited(t, dev, slotSize)
		err := gpu.WithScope(limited.Context(), dev, func(*gpu.Scope) error { return nil }, gpu.Reserve(2*slotSize))
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		assert.False(t, evicted(victim))
	})
	t.Run("a reservation larger than the device evicts nothing", func(t *testing.T) {
		dev := openHost(t, gpu.HostMemory(2*slotSize))
		victim, _ := load(t, dev, 1, gpu.Evictable(0))
		_, err := dev.NewScope(gpu.Reserve(3 * slotSize))
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		assert.False(t, evicted(victim))
	})
}
