package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/pool"
)

// faultOps are the kinds of driver calls that the pool and scopes make,
// and the allocations the scopes ask for.
var faultOps = []gputest.Op{gputest.OpAlloc, gputest.OpFree, gputest.OpCopy, gputest.OpReserve, gputest.OpMap, gputest.OpAccess, gputest.OpUnmap, gputest.OpEvent, gputest.OpStream, gputest.OpRequest}

// faultWorkload grows the device, frees, keeps, moves memory under the cap,
// empties the cache and closes a long-lived scope, and returns every error
// it met.
func faultWorkload(dev *gpu.Device) []error {
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	weights, err := dev.NewScope(gpu.Name("weights"), gpu.Reserve(4<<20))
	note(err)
	if err != nil {
		return errs
	}
	var kept []gpu.Buffer
	for i := range 6 {
		note(gpu.WithScope(weights.Context(), dev, func(s *gpu.Scope) error {
			small, err := s.Alloc(500) // from the reservation
			if err != nil {
				return err
			}
			if err := small.CopyFromHost([]byte{byte(i)}); err != nil {
				return err
			}
			big, err := s.Alloc(int64(3+i) << 20)
			if err != nil {
				return err
			}
			if i%2 == 0 {
				if err := s.Keep(big); err != nil {
					return err
				}
				kept = append(kept, big)
			}
			return nil
		}))
	}
	for _, b := range kept[:len(kept)/2] {
		note(weights.Free(b))
	}
	note(gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(20 << 20) // needs memory moved from under free blocks
		return err
	}))
	note(dev.EmptyCache())
	// A scope on a stream of its own: its memory comes from arenas of that
	// stream, which reserve address space of their own.
	note(gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		if err != nil {
			return err
		}
		return gpu.WithScope(s.Context(), dev, func(on *gpu.Scope) error {
			_, err := on.Alloc(2 << 20)
			return err
		}, gpu.OnStream(st))
	}))
	note(weights.Close())
	return errs
}

func TestDriverFaultsLoseNothing(t *testing.T) {
	for _, op := range faultOps {
		hit := 0
		for n := 1; n <= 8; n++ {
			t.Run(fmt.Sprintf("the %s call number %d fails", op, n), func(t *testing.T) {
				dev, drv, err := gputest.OpenFaulty(64<<20, gpu.PoolOptions(pool.MaxReserved(40<<20), pool.GrowthStep(0)))
				require.NoError(t, err)
				drv.FailNth(op, n)
				errs := faultWorkload(dev)
				for _, err := range errs {
					assert.True(t, errors.Is(err, gputest.ErrInjected) || errors.Is(err, gpu.ErrOutOfMemory),
						"an error that is neither the fault nor its consequence: %v", err)
				}
				hit += drv.Injected()
				drv.FailNth(op, 0)
				require.NoError(t, dev.EmptyCache(), "once the driver works again, everything goes back")
				assert.Zero(t, dev.Stats().Allocated, "nothing is left live")
				assert.Zero(t, dev.Stats().Reserved)
				assert.Zero(t, drv.Used())
				require.NoError(t, dev.Close(), "nothing leaked: no handle, no reservation")
			})
		}
		assert.Positive(t, hit, "the workload makes %s calls, and the faults fired", op)
	}
}

func TestDriverFaultsAtCloseLeaveNothing(t *testing.T) {
	for _, op := range faultOps {
		t.Run(fmt.Sprintf("a %s call fails while the device closes", op), func(t *testing.T) {
			dev, drv, err := gputest.OpenFaulty(64 << 20)
			require.NoError(t, err)
			require.Empty(t, faultWorkload(dev))
			drv.FailNth(op, 1)
			_ = dev.Close() // may report the fault
			assert.Zero(t, drv.Used(), "the closed driver holds nothing")
			// No stream is left to end at close: the workload's ended with its scope.
			if op != gputest.OpCopy && op != gputest.OpMap && op != gputest.OpAccess && op != gputest.OpAlloc && op != gputest.OpStream && op != gputest.OpRequest {
				assert.Positive(t, drv.Injected(), "closing makes %s calls, and the fault fired", op)
			}
		})
	}
}

// A growth whose access call fails, and whose undoing unmap fails too,
// leaves a handle mapped where the arena sees a hole: it must not be
// taken as idle and mapped again, and once the driver works it goes back.
func TestAHandleLeftMappedByAFailedGrowthIsNotReused(t *testing.T) {
	dev, drv, err := gputest.OpenFaulty(64<<20, gpu.PoolOptions(pool.GrowthStep(0)))
	require.NoError(t, err)
	drv.FailWhen(func(c gputest.Call) bool { return c.Op == gputest.OpAccess || c.Op == gputest.OpUnmap })
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(4 << 20)
		return err
	})
	require.ErrorIs(t, err, gputest.ErrInjected)
	drv.FailWhen(nil)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(4 << 20)
		if err != nil {
			return err
		}
		return b.CopyFromHost(make([]byte, 4<<20))
	}))
	require.NoError(t, dev.EmptyCache())
	assert.Zero(t, dev.Stats().Reserved)
	assert.Zero(t, drv.Used())
	require.NoError(t, dev.Close(), "no handle and no reservation left")
}
