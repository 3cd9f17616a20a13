package gpu_test

import (
	"context"
	"errors"
	"io"
	"regexp"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/gpu/internal/host"
	"github.com/gpuscope/gpuscope/internal/registry"
	"github.com/gpuscope/gpuscope/pool"
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
		dev, drv, err := gputest.OpenFaulty(64 << 20)
		require.NoError(t, err)
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
		registry.TakeForcedCloses[gpu.ScopeSnapshot]()
		assert.Zero(t, drv.Used(), "round %d: the driver still holds memory", round)
	}
}

func TestNilAndZeroReceiversAreErrorsNotPanics(t *testing.T) {
	for name, dev := range map[string]*gpu.Device{"nil": nil, "zero": {}} {
		t.Run(name+" Device", func(t *testing.T) {
			assert.ErrorIs(t, dev.Close(), gpu.ErrNoDevice)
			assert.ErrorIs(t, dev.EmptyCache(), gpu.ErrNoDevice)
			_, _, err := dev.MemInfo()
			assert.ErrorIs(t, err, gpu.ErrNoDevice)
			_, err = dev.NewScope()
			assert.ErrorIs(t, err, gpu.ErrNoDevice)
			assert.ErrorIs(t, gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }), gpu.ErrNoDevice)
			assert.Zero(t, dev.Stats())
			assert.Empty(t, dev.Name())
			assert.Nil(t, dev.Driver())
			_, err = dev.Snapshot()
			assert.ErrorIs(t, err, gpu.ErrNoDevice)
			assert.Contains(t, dev.Summary(), "no summary")
			assert.ErrorIs(t, dev.WriteProfile(io.Discard), gpu.ErrNoDevice)
			_, err = dev.StartRecording(io.Discard)
			assert.ErrorIs(t, err, gpu.ErrNoDevice)
			assert.NotEmpty(t, dev.String())
		})
	}
	dev := testDevice(t, 0)
	for name, s := range map[string]*gpu.Scope{"nil": nil, "zero": {}} {
		t.Run(name+" Scope", func(t *testing.T) {
			_, err := s.Alloc(64)
			assert.ErrorIs(t, err, gpu.ErrScopeClosed)
			assert.ErrorIs(t, s.Close(), gpu.ErrScopeClosed)
			assert.ErrorIs(t, s.Free(gpu.Buffer{}), gpu.ErrScopeClosed)
			assert.ErrorIs(t, s.Keep(gpu.Buffer{}), gpu.ErrScopeClosed)
			assert.Empty(t, s.Path())
			assert.Nil(t, s.Device())
			assert.Zero(t, s.Stats())
			called := false
			err = gpu.WithScope(s.Context(), dev, func(*gpu.Scope) error { called = true; return nil })
			assert.ErrorIs(t, err, gpu.ErrScopeClosed, "a child of no scope is an error, not a new root")
			assert.False(t, called)
		})
	}
}

func TestWithScopeReportsADeviceClosedUnderIt(t *testing.T) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(1 << 20)
		require.NoError(t, err)
		assert.Error(t, dev.Close(), "closing reports the scope left open")
		return nil
	})
	assert.ErrorIs(t, err, gpu.ErrDeviceClosed, "fn returned nil, but its scope was torn down")
	assert.Len(t, registry.TakeForcedCloses[gpu.ScopeSnapshot](), 1, "the scope the device closed")
}

func TestEveryBufferIsAlignedTo256Bytes(t *testing.T) {
	for name, opts := range map[string][]gpu.DeviceOption{
		"pages mapped":     nil,
		"classic segments": {gpu.PoolOptions(pool.Expand(pool.ExpandNever))},
	} {
		t.Run(name, func(t *testing.T) {
			dev := openHost(t, opts...)
			err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				for _, n := range []int64{1, 3, 255, 257, 1000, 4097, 1<<20 + 3, 5 << 20} {
					b, err := s.Alloc(n)
					require.NoError(t, err)
					assert.Zero(t, b.Ptr()%256, "%d bytes at %#x", n, b.Ptr())
				}
				return nil
			}, gpu.Reserve(1<<20))
			require.NoError(t, err)
		})
	}
}

func TestAFreeWhoseDriverFailsSaysTheBufferIsFreed(t *testing.T) {
	dev, drv := openTestHost(t, gpu.PoolOptions(pool.ReleaseThreshold(0)))
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(4 << 20)
		require.NoError(t, err)
		drv.FailNth(gputest.OpFree, 1) // the pool gives the memory back at once, and that fails
		err = s.Free(b)
		require.ErrorIs(t, err, gputest.ErrInjected)
		assert.Contains(t, err.Error(), "is freed, but giving memory back failed")
		assert.ErrorIs(t, s.Free(b), gpu.ErrFreed, "freed it was: a retry is a double free")
		assert.ErrorIs(t, b.CopyFromHost([]byte{1}), gpu.ErrFreed)
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, dev.EmptyCache(), "what the driver would not take is still the pool's, and goes back later")
	assert.Zero(t, dev.Stats().Reserved)
}

func TestReleaseErrorsOfAPanickingScopeAreReported(t *testing.T) {
	var got []error
	dev, drv := openTestHost(t, gpu.PoolOptions(pool.ReleaseThreshold(0)), gpu.OnReleaseError(func(err error) { got = append(got, err) }))
	assert.PanicsWithValue(t, "boom", func() {
		_ = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(4 << 20)
			require.NoError(t, err)
			drv.FailNth(gputest.OpFree, 1) // releasing it at the scope's end fails
			panic("boom")
		}, gpu.Name("request"))
	}, "the panic goes on with its own value")
	require.Len(t, got, 1, "and the release error is not lost")
	assert.ErrorIs(t, got[0], gputest.ErrInjected)
	assert.Contains(t, got[0].Error(), `scope "request" ended by a panic`)
	require.NoError(t, dev.EmptyCache())

	t.Run("without a handler gputest reports them", func(t *testing.T) {
		dev, drv := openTestHost(t, gpu.PoolOptions(pool.ReleaseThreshold(0)))
		drv.FailNth(gputest.OpFree, 1)
		assert.Panics(t, func() {
			_ = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				_, err := s.Alloc(4 << 20)
				require.NoError(t, err)
				panic("boom")
			})
		})
		dropped := registry.TakeDroppedErrors()
		require.Len(t, dropped, 1)
		assert.ErrorIs(t, dropped[0], gputest.ErrInjected)
		require.NoError(t, dev.EmptyCache())
	})
	_, err := gpu.OpenHost(gpu.OnReleaseError(nil))
	assert.Error(t, err)
}

func TestClosedDevice(t *testing.T) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	b, err := s.Alloc(1 << 20)
	require.NoError(t, err)
	err = dev.Close()
	require.Error(t, err, "Close reports scopes left open")
	assert.Contains(t, err.Error(), "weights")
	forced := registry.TakeForcedCloses[gpu.ScopeSnapshot]()
	require.Len(t, forced, 1, "and remembers them for gputest")
	assert.Equal(t, "weights", forced[0].Path)
	require.Len(t, forced[0].Buffers, 1)
	assert.Equal(t, int64(1<<20), forced[0].Buffers[0].Size)
	assert.ErrorIs(t, b.CopyFromHost([]byte{1}), gpu.ErrScopeClosed, "its memory was released")
	_, err = s.Alloc(1)
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	_, err = dev.NewScope()
	assert.ErrorIs(t, err, gpu.ErrDeviceClosed)
	assert.ErrorIs(t, gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }), gpu.ErrDeviceClosed)
	assert.NoError(t, dev.Close(), "Close is idempotent")
	assert.ErrorIs(t, dev.EmptyCache(), gpu.ErrDeviceClosed)
}

func TestOpenWithoutCUDA(t *testing.T) {
	if gpu.CUDA {
		t.Skip("this build has CUDA support; TestOpenCUDA covers Open")
	}
	_, err := gpu.Open(0)
	assert.ErrorIs(t, err, gpu.ErrNoDevice)
	assert.Contains(t, err.Error(), "-tags cuda")
	_, err = gpu.Devices()
	assert.ErrorIs(t, err, gpu.ErrNoDevice)
}

func TestEmptyCacheReturnsReservedToZero(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(5 << 20)
		return err
	}))
	assert.Positive(t, dev.Stats().Reserved)
	require.NoError(t, dev.EmptyCache())
	assert.Zero(t, dev.Stats().Reserved)
}

// Two open devices never share a name, so that a leak report or
// gputest.Devices tells them apart: a name without a number gets the
// lowest no open device of its kind has ("host:0", "host:1"), taken again
// once its device closes; a name with its number is kept.
func TestOpenDevicesHaveDistinctNames(t *testing.T) {
	a, err := gpu.OpenHost()
	require.NoError(t, err)
	b, _, err := gputest.OpenFaulty(0)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	hostN := regexp.MustCompile(`^host:\d+$`)
	assert.Regexp(t, hostN, a.Name())
	assert.Regexp(t, hostN, b.Name(), "a faulty host device is a host device")
	assert.NotEqual(t, a.Name(), b.Name())
	assert.Contains(t, b.String(), b.Name()+" (host memory")
	freed := a.Name()
	require.NoError(t, a.Close())
	c, err := gpu.OpenHost()
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	assert.Equal(t, freed, c.Name(), "the lowest number no open device has")

	for name, want := range map[string]string{"fake": "fake:0", "cuda:3": "cuda:3"} {
		drv, err := host.New(4 << 20)
		require.NoError(t, err)
		dev, err := gpu.OpenDriver(drv, name)
		require.NoError(t, err)
		assert.Equal(t, want, dev.Name())
		require.NoError(t, dev.Close())
	}
}

// OpenDefault opens GPU 0 where the build has CUDA support and the
// machine a GPU, and the host device otherwise, sized by HostMemory, which
// a GPU ignores; the other options apply to either, and a bad one fails.
func TestOpenDefaultOpensTheGPUElseTheHostDevice(t *testing.T) {
	dev, err := gpu.OpenDefault(gpu.HostMemory(8<<20), gpu.MaxReserved(4<<20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	if gpu.CUDA {
		assert.Equal(t, "cuda:0", dev.Name())
	} else {
		assert.Regexp(t, `^host:\d+ \(host memory, 8.00 MiB\)$`, dev.String())
	}
	assert.Equal(t, int64(4<<20), dev.MaxReserved(), "the cap applies to either")
	_, err = gpu.OpenDefault(gpu.MaxReserved(-1))
	assert.ErrorIs(t, err, gpu.ErrInvalidSize)
}
