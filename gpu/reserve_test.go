package gpu_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
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
