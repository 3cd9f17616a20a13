package gpu_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// The hot path's Go allocations are counted, not timed: with stacks not
// recorded (the default outside tests), an unnamed scope opened and ended
// allocates one object (its *gpu.Scope), and an allocation and free
// through it none. Making an unnamed scope's name at every open made
// WithScope allocate three times and take twice as long.
func TestTheHotPathAllocatesWhatItMust(t *testing.T) {
	gpu.RecordStacks(false) // TestMain records stacks
	defer gpu.RecordStacks(true)
	dev, err := gpu.OpenHost(gpu.HostMemory(64 << 20))
	require.NoError(t, err)
	defer dev.Close()
	ctx := context.Background()
	fn := func(*gpu.Scope) error { return nil }
	require.NoError(t, gpu.WithScope(ctx, dev, fn)) // warm the slot tables
	assert.LessOrEqual(t, testing.AllocsPerRun(200, func() { _ = gpu.WithScope(ctx, dev, fn) }), 1.0,
		"WithScope of an unnamed scope")
	err = gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(256)
		require.NoError(t, err)
		require.NoError(t, s.Free(b))
		assert.Zero(t, testing.AllocsPerRun(200, func() {
			b, _ := s.Alloc(256)
			_ = s.Free(b)
		}), "an allocation and free in a scope")
		return nil
	})
	require.NoError(t, err)
}

// Page-locked memory's AllocHost and Free, served by the device's cache,
// allocate nothing: the block's record in its scope is reused with it.
func TestAllocHostAndFreeAllocateNothing(t *testing.T) {
	gpu.RecordStacks(false)
	defer gpu.RecordStacks(true)
	dev := testDevice(t, 0)
	s, err := dev.NewScope()
	require.NoError(t, err)
	defer s.Close()
	h, err := gpu.AllocHost[byte](s, 4096)
	require.NoError(t, err)
	require.NoError(t, h.Free())
	assert.Zero(t, testing.AllocsPerRun(200, func() {
		h, _ := gpu.AllocHost[byte](s, 4096)
		_ = h.Free()
	}), "an AllocHost and Free the cache serves")
}
