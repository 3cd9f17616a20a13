package gpu_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/host"
)

// TestCloseRacingAllocationsLeavesNothing closes devices while 16
// goroutines allocate on them: whatever an allocation in flight does, the
// driver must end with nothing in use.
func TestCloseRacingAllocationsLeavesNothing(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		dev, err := gpu.OpenHost(gpu.HostMemory(64 << 20))
		require.NoError(t, err)
		drv, ok := dev.Driver().(*host.Driver)
		require.True(t, ok)
		var wg sync.WaitGroup
		started := make(chan struct{}, 16)
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
						_, err := s.Alloc(int64(1+(g*7919+i*104729)%(3<<20)) + int64(i%3)<<20)
						return err
					})
					if i == 0 {
						started <- struct{}{}
					}
					if err != nil {
						// Only the device's closing, or a full device, may
						// stop it.
						assert.True(t, errors.Is(err, gpu.ErrDeviceClosed) || errors.Is(err, gpu.ErrScopeClosed) ||
							errors.Is(err, gpu.ErrOutOfMemory), "round %d: %v", round, err)
						return
					}
				}
			}()
		}
		for range 16 {
			<-started
		}
		_ = dev.Close() // scopes open at this moment are reported, and that is not the point here
		wg.Wait()
		assert.Zero(t, drv.Used(), "round %d: the driver still holds memory", round)
	}
}
