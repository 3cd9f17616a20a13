// The host device maps pages on Linux only, and a Sleepable scope needs
// them.

//go:build linux

package gpu_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/internal/host"
)

// largeHost is a host device that says it has total bytes, an H100's,
// while the memory it maps stays small: the pools' budget (their cap, else
// the device's memory) is then where a GPU's is, and their handles are cut
// as they would be there. It records the sizes of the handles created.
type largeHost struct {
	*host.Driver
	total int64

	mu      sync.Mutex // protects created
	created []int64

	// recording, where not nil, runs as an event is recorded, and what it
	// returns is the call's error where not nil.
	recording func() error
}

func (d *largeHost) RecordEvent(stream uintptr) (uintptr, error) {
	if d.recording != nil {
		if err := d.recording(); err != nil {
			return 0, err
		}
	}
	return d.Driver.RecordEvent(stream)
}

func (d *largeHost) MemInfo() (free, total int64, err error) {
	free, _, err = d.Driver.MemInfo()
	return free, d.total, err
}

func (d *largeHost) Create(size int64) (uint64, error) {
	d.mu.Lock()
	d.created = append(d.created, size)
	d.mu.Unlock()
	return d.Driver.Create(size)
}

// handles returns the sizes of the handles created since it was last
// called.
func (d *largeHost) handles() []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.created
	d.created = nil
	return out
}

// openLargeHost opens a largeHost of 80 GiB over 256 MiB of memory.
func openLargeHost(t *testing.T, opts ...gpu.DeviceOption) (*gpu.Device, *largeHost) {
	t.Helper()
	h, err := host.New(256 << 20)
	require.NoError(t, err)
	drv := &largeHost{Driver: h, total: 80 << 30}
	dev, err := gpu.OpenDriver(drv, "large", opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return dev, drv
}

// capped is a cap in the range where a growth for 20 MiB makes handles of
// one page (docs/pool.md, "Large blocks grow in pages"): 4 GiB, whose
// handles are at most 16 MiB and whose pages are 2 MiB.
const capped = 4 << 30

// growth allocates 20 MiB in s and returns the sizes of the handles that
// made room for it.
func growth(t *testing.T, drv *largeHost, s *gpu.Scope) []int64 {
	t.Helper()
	drv.handles()
	_, err := s.Alloc(20 << 20)
	require.NoError(t, err)
	return drv.handles()
}

// inPages asserts that the handles are pages of 2 MiB, enough for 20 MiB.
func inPages(t *testing.T, handles []int64, msg string) {
	t.Helper()
	assert.Len(t, handles, 10, msg)
	for _, h := range handles {
		assert.EqualValues(t, 2<<20, h, "%s: %v", msg, handles)
	}
}

// wholeHandle asserts that a growth for 20 MiB made one handle, as one
// does under a budget of 80 GiB.
func wholeHandle(t *testing.T, handles []int64, msg string) {
	t.Helper()
	require.Len(t, handles, 1, msg)
	assert.GreaterOrEqual(t, handles[0], int64(20<<20), msg)
}

func TestASleepableScopeUnderTheDevicesCapGrowsInPagesAsTheDevicesPool(t *testing.T) {
	for _, open := range []struct {
		name string
		opt  gpu.DeviceOption
		set  func(*gpu.Device) error
	}{
		{"a cap given at open", gpu.MaxReserved(capped), nil},
		{"a fraction given at open", gpu.MaxReservedFraction(0.05), nil},
		{"SetMaxReserved", nil, func(d *gpu.Device) error { return d.SetMaxReserved(capped) }},
		{"SetMaxReservedFraction", nil, func(d *gpu.Device) error { return d.SetMaxReservedFraction(0.05) }},
	} {
		t.Run(open.name, func(t *testing.T) {
			var opts []gpu.DeviceOption
			if open.opt != nil {
				opts = append(opts, open.opt)
			}
			dev, drv := openLargeHost(t, opts...)
			if open.set != nil {
				require.NoError(t, open.set(dev))
			}
			root, err := dev.NewScope(gpu.Name("activations"))
			require.NoError(t, err)
			defer func() { assert.NoError(t, root.Close()) }()
			inPages(t, growth(t, drv, root), "the device's pool")
			weights, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
			require.NoError(t, err)
			defer func() { assert.NoError(t, weights.Close()) }()
			inPages(t, growth(t, drv, weights), "the Sleepable scope's pool")
		})
	}
}

func TestASleepableScopesPoolFollowsTheCapAsItChanges(t *testing.T) {
	ctx := context.Background()
	dev, drv := openLargeHost(t)
	weights, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
	require.NoError(t, err)
	defer func() { assert.NoError(t, weights.Close()) }()
	wholeHandle(t, growth(t, drv, weights), "no cap: the device's 80 GiB is the budget")

	require.NoError(t, dev.SetMaxReserved(capped))
	inPages(t, growth(t, drv, weights), "under the cap set awake")

	require.NoError(t, dev.SetMaxReserved(0))
	wholeHandle(t, growth(t, drv, weights), "the cap removed")

	require.NoError(t, weights.Sleep(ctx, gpu.KeepContents))
	require.NoError(t, dev.SetMaxReservedFraction(0.05))
	assert.Zero(t, gpu.SleeperMaxReserved(weights), "a pool asleep takes no cap until it wakes")
	require.NoError(t, weights.Wake(ctx))
	inPages(t, growth(t, drv, weights), "under the cap set asleep, after Wake")

	require.NoError(t, weights.Sleep(ctx, gpu.DiscardContents))
	require.NoError(t, dev.SetMaxReserved(0))
	require.NoError(t, weights.Wake(ctx))
	wholeHandle(t, growth(t, drv, weights), "the cap removed asleep, after Wake")
}

// A cap set while a Wake holds the scope (here from OnOutOfMemory, which a
// Wake that found no room calls) neither waits for the Wake nor is lost:
// the pool takes it once the scope wakes.
func TestACapSetDuringAWakeIsTakenOnceTheScopeWakes(t *testing.T) {
	ctx := context.Background()
	var dev *gpu.Device
	raised := false
	dev, drv := openLargeHost(t, gpu.MaxReserved(64<<20), gpu.OnOutOfMemory(func(error) {
		if !raised {
			raised = true
			assert.NoError(t, dev.SetMaxReserved(capped))
		}
	}))
	weights, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
	require.NoError(t, err)
	defer func() { assert.NoError(t, weights.Close()) }()
	_, err = weights.Alloc(32 << 20)
	require.NoError(t, err)
	require.NoError(t, weights.Sleep(ctx, gpu.KeepContents))
	other, err := dev.NewScope(gpu.Name("server"))
	require.NoError(t, err)
	defer func() { assert.NoError(t, other.Close()) }()
	_, err = other.Alloc(48 << 20)
	require.NoError(t, err)

	require.ErrorIs(t, weights.Wake(ctx), gpu.ErrOutOfMemory, "the cap of 64 MiB holds 48 MiB and not 32 more")
	require.True(t, raised)
	require.NoError(t, weights.Wake(ctx), "the cap raised during the first Wake")
	assert.EqualValues(t, capped, gpu.SleeperMaxReserved(weights))
	inPages(t, growth(t, drv, weights), "under the cap set during a Wake")
}

// A cap set while a Sleep holds the scope, one that then fails and leaves
// it awake, neither waits for the Sleep nor is lost: the pool takes it as
// the Sleep lets go.
func TestACapSetDuringASleepThatFailsIsTakenAsItReturns(t *testing.T) {
	dev, drv := openLargeHost(t)
	weights, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
	require.NoError(t, err)
	defer func() { assert.NoError(t, weights.Close()) }()
	wholeHandle(t, growth(t, drv, weights), "no cap")
	refused := errors.New("the event a Sleep waits on")
	drv.recording = func() error {
		drv.recording = nil
		require.NoError(t, dev.SetMaxReserved(capped), "a cap set while the Sleep waits for the scope's streams")
		return refused
	}
	require.ErrorIs(t, weights.Sleep(context.Background(), gpu.KeepContents), refused)
	require.Nil(t, drv.recording, "the Sleep recorded an event")
	assert.False(t, weights.Stats().Asleep)
	assert.EqualValues(t, capped, gpu.SleeperMaxReserved(weights))
	inPages(t, growth(t, drv, weights), "under the cap set during a Sleep")
}

// Caps set while the scope sleeps, wakes and ends, from many goroutines:
// race-clean, and once they are done the pool of a scope awake has the
// cap the device has.
func TestCapsRacingSleepWakeAndEndLeaveThePoolWithTheDevicesCap(t *testing.T) {
	ctx := context.Background()
	dev, _ := openLargeHost(t)
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	caps := []int64{0, capped, 8 << 30, 3 << 30}
	for range rounds {
		weights, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
		require.NoError(t, err)
		_, err = weights.Alloc(4 << 20)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Go(func() {
				for i := range 8 {
					assert.NoError(t, dev.SetMaxReserved(caps[(g+i)%len(caps)]))
				}
			})
		}
		wg.Go(func() {
			for range 4 {
				assert.NoError(t, weights.Sleep(ctx, gpu.KeepContents))
				assert.NoError(t, weights.Wake(ctx))
			}
		})
		wg.Wait()
		assert.Equal(t, dev.MaxReserved(), gpu.SleeperMaxReserved(weights), "the cap the device has, after the race")
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			assert.NoError(t, dev.SetMaxReserved(caps[1]))
		}()
		assert.NoError(t, weights.Close())
		<-ended
	}
	assert.True(t, slices.Contains(caps, dev.MaxReserved()))
}

// A Sleepable scope's pool meets the device's cap before the device's
// pool does where what it holds leaves no room: the error shows what the
// cap covers on the device, not the scope's part of it.
func TestAnAllocationTheCapRefusesInASleepableScopeShowsTheDevicesFigures(t *testing.T) {
	dev, _ := openLargeHost(t, gpu.MaxReserved(64<<20))
	other, err := dev.NewScope(gpu.Name("server"))
	require.NoError(t, err)
	defer func() { assert.NoError(t, other.Close()) }()
	_, err = other.Alloc(10 << 20)
	require.NoError(t, err)
	weights, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
	require.NoError(t, err)
	defer func() { assert.NoError(t, weights.Close()) }()
	_, err = weights.Alloc(48 << 20)
	require.NoError(t, err)

	_, err = weights.Alloc(32 << 20)
	require.ErrorIs(t, err, gpu.ErrOutOfMemory)
	var oom *gpu.OOMError
	require.ErrorAs(t, err, &oom)
	require.NotNil(t, oom.Device)
	st := dev.Stats()
	assert.Equal(t, st.Reserved, oom.Device.Reserved, "what the cap covers")
	assert.Equal(t, st.Allocated, oom.Device.Allocated)
	assert.Contains(t, err.Error(), "the pool's cap of 64.00 MiB")
	assert.Contains(t, err.Error(), gpu.Bytes(st.Reserved).String()+" reserved under it")
}

// A cap below what the device reserves has the Sleepable scopes' pools
// give back what they cache, however it is given: SetMaxReservedFraction
// (PyTorch's set_per_process_memory_fraction, through libgpuscope) is
// SetMaxReserved with the cap as a fraction. Here the scope's pool holds
// less than the cap itself (its own cap gives back nothing): only the
// device's figure is over it.
func TestALowerCapHasTheSleepableScopesGiveBackWhatTheyCacheHoweverItIsSet(t *testing.T) {
	fraction := 0.001 // of 80 GiB: 81.9 MiB
	capBytes := int64(fraction * (80 << 30))
	for _, set := range []struct {
		name string
		set  func(*gpu.Device) error
	}{
		{"SetMaxReserved", func(d *gpu.Device) error { return d.SetMaxReserved(capBytes) }},
		{"SetMaxReservedFraction", func(d *gpu.Device) error { return d.SetMaxReservedFraction(fraction) }},
	} {
		t.Run(set.name, func(t *testing.T) {
			dev, _ := openLargeHost(t)
			weights, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
			require.NoError(t, err)
			defer func() { assert.NoError(t, weights.Close()) }()
			b, err := weights.Alloc(40 << 20)
			require.NoError(t, err)
			require.NoError(t, weights.Free(b))
			other, err := dev.NewScope(gpu.Name("server"))
			require.NoError(t, err)
			defer func() { assert.NoError(t, other.Close()) }()
			_, err = other.Alloc(60 << 20)
			require.NoError(t, err)
			before := dev.Stats().Reserved
			require.Greater(t, before, capBytes)

			require.NoError(t, set.set(dev))
			assert.LessOrEqual(t, dev.Stats().Reserved, before-40<<20, "the 40 MiB the Sleepable scope's pool cached went back")
		})
	}
}

// A cap SetMaxReserved refuses (below one page) changes nothing: the
// Sleepable scopes' pools keep what they cache, as the device's pool does.
func TestACapRefusedLeavesTheSleepableScopesCachesAsTheyWere(t *testing.T) {
	dev, _ := openLargeHost(t)
	weights, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
	require.NoError(t, err)
	defer func() { assert.NoError(t, weights.Close()) }()
	b, err := weights.Alloc(8 << 20)
	require.NoError(t, err)
	require.NoError(t, weights.Free(b))
	before := dev.Stats()
	require.Positive(t, before.Cached)

	require.ErrorIs(t, dev.SetMaxReserved(1), gpu.ErrInvalidSize)
	after := dev.Stats()
	assert.Equal(t, before.Reserved, after.Reserved, "nothing given back")
	assert.Equal(t, before.Cached, after.Cached)
	assert.Zero(t, dev.MaxReserved())
}

// Where the device itself has no room, an out-of-memory error says how
// much the pools cache (free memory EmptyCache gives back): the buffers of
// a Sleepable scope awake are no part of it, though its pages count in
// the device's pool's Reserved.
func TestAnOutOfMemoryErrorCountsNoLiveBufferOfASleepableScopeAsCached(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(256 << 20))
	require.NoError(t, err)
	defer func() { assert.NoError(t, dev.Close()) }()
	weights, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
	require.NoError(t, err)
	defer func() { assert.NoError(t, weights.Close()) }()
	_, err = weights.Alloc(128 << 20)
	require.NoError(t, err)
	server, err := dev.NewScope(gpu.Name("server"))
	require.NoError(t, err)
	defer func() { assert.NoError(t, server.Close()) }()

	_, err = server.Alloc(192 << 20)
	require.ErrorIs(t, err, gpu.ErrOutOfMemory)
	var oom *gpu.OOMError
	require.ErrorAs(t, err, &oom)
	st := dev.Stats()
	assert.Equal(t, st.Cached, oom.Cached, "what the pools cache: %v", err)
	require.NotNil(t, oom.Device)
	assert.Equal(t, st.Allocated, oom.Device.Allocated, "the scope's buffers are allocated")
	assert.Equal(t, st.Reserved, oom.Device.Reserved)
	assert.Less(t, oom.Cached, int64(128<<20), "the scope's 128 MiB are live: %v", err)
}
