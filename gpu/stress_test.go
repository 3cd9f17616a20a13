package gpu_test

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/internal/registry"
	"github.com/gpuscope/gpuscope/pool"
)

var stressFor = flag.Duration("stress", 300*time.Millisecond,
	"how long TestStress runs; .ci/run runs it for 20s under -race")

// TestStress runs 64 goroutines that open nested scopes with reservations
// and limits, allocate, copy, keep, free and empty the cache, under contexts
// cancelled at random, in rounds of a fresh device each; every fourth round
// closes the device under them. After each round the driver must hold
// nothing: no memory allocated, no handle or reservation left.
func TestStress(t *testing.T) {
	deadline := time.Now().Add(*stressFor)
	for round := 0; round == 0 || time.Now().Before(deadline); round++ {
		closeUnder := round%4 == 3
		seed := uint64(time.Now().UnixNano())
		stressRound(t, round, seed, closeUnder)
		if t.Failed() {
			t.Fatalf("round %d failed (seed %d, device closed under the goroutines: %v)", round, seed, closeUnder)
		}
	}
}

func stressRound(t *testing.T, round int, seed uint64, closeUnder bool) {
	dev, drv, err := gputest.OpenFaulty(256<<20, gpu.PoolOptions(pool.MaxReserved(160<<20)))
	require.NoError(t, err)
	weights, err := dev.NewScope(gpu.Name("weights"), gpu.Reserve(8<<20), gpu.Limit(64<<20))
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := stressStep(r, dev, weights); err != nil && !expected(err) {
					t.Errorf("round %d, goroutine %d: %v", round, g, err)
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if closeUnder {
		_ = dev.Close()
		close(stop)
		wg.Wait()
		registry.TakeForcedCloses[gpu.ScopeSnapshot]()
		assert.Zero(t, drv.Used(), "round %d: the closed driver holds memory", round)
		return
	}
	close(stop)
	wg.Wait()
	require.NoError(t, weights.Close())
	require.NoError(t, dev.EmptyCache())
	st := dev.Stats()
	assert.Zero(t, st.Allocated, "round %d: memory left live", round)
	assert.Zero(t, st.Reserved, "round %d: memory the cache did not give back", round)
	assert.Zero(t, drv.Used(), "round %d: memory the driver still holds", round)
	assert.NoError(t, dev.Close(), "round %d: a handle or reservation left", round)
}

// stressStep does one random thing.
func stressStep(r *rand.Rand, dev *gpu.Device, weights *gpu.Scope) error {
	switch r.IntN(10) {
	case 0:
		return dev.EmptyCache()
	case 1:
		// A long-lived scope's own allocation, freed at once.
		b, err := weights.Alloc(int64(1 + r.IntN(256<<10)))
		if err != nil {
			return err
		}
		return weights.Free(b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	parent := context.Background()
	if r.IntN(2) == 0 {
		parent = weights.Context()
	}
	var opts []gpu.ScopeOption
	if r.IntN(3) == 0 {
		opts = append(opts, gpu.Reserve(int64(1+r.IntN(4<<20))))
	}
	if r.IntN(3) == 0 {
		opts = append(opts, gpu.Limit(int64(8<<20+r.IntN(24<<20))))
	}
	if parent != context.Background() {
		var cancelParent context.CancelFunc
		ctx, cancelParent = context.WithCancel(parent)
		defer cancelParent()
	}
	cancelAt := r.IntN(8) // cancelled after this many allocations, if below 6
	return gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
		for i := range 6 {
			if i == cancelAt {
				cancel()
			}
			b, err := s.Alloc(int64(1 + r.IntN(6<<20)))
			if err != nil {
				return err
			}
			if err := b.CopyFromHost([]byte{byte(i)}); err != nil {
				return err
			}
			switch r.IntN(4) {
			case 0:
				if err := s.Free(b); err != nil {
					return err
				}
			case 1:
				if err := s.Keep(b); err != nil && !errors.Is(err, gpu.ErrNotKept) {
					return err
				}
			}
		}
		if r.IntN(2) == 0 {
			return gpu.WithScope(s.Context(), dev, func(c *gpu.Scope) error {
				_, err := c.Alloc(int64(1 + r.IntN(1<<20)))
				return err
			}, gpu.Limit(2<<20))
		}
		return nil
	}, opts...)
}

// expected reports whether err is one a stressed device may rightly give.
func expected(err error) bool {
	for _, target := range []error{gpu.ErrOutOfMemory, context.Canceled, gpu.ErrDeviceClosed,
		gpu.ErrScopeClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
