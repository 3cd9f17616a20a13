package gpu_test

import (
	"context"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/internal/host"
)

// launcher is the host device with a kernel launcher that records what it
// was asked to do and runs nothing.
type launcher struct {
	*host.Driver
	mu       sync.Mutex
	loaded   map[uintptr]bool
	launches [][]uint64
	streams  []uintptr
}

func (l *launcher) LoadModule(image []byte) (uintptr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := uintptr(len(l.loaded) + 1)
	l.loaded[id] = true
	return id, nil
}

func (l *launcher) UnloadModule(m uintptr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.loaded, m)
	return nil
}

func (l *launcher) Function(m uintptr, name string) (uintptr, error) { return m*100 + 1, nil }

func (l *launcher) Launch(fn uintptr, grid, block [3]int, shared int, stream uintptr, params []uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.launches = append(l.launches, append([]uint64(nil), params...))
	l.streams = append(l.streams, stream)
	return nil
}

func openLauncher(t *testing.T) (*gpu.Device, *launcher) {
	t.Helper()
	drv, err := host.New(1 << 30)
	require.NoError(t, err)
	l := &launcher{Driver: drv, loaded: map[uintptr]bool{}}
	dev, err := gpu.OpenDriver(l, "launcher")
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return dev, l
}

func TestLaunchPassesBuffersAndValues(t *testing.T) {
	dev, l := openLauncher(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		mod, err := s.LoadModule([]byte("ptx"))
		require.NoError(t, err)
		fn, err := mod.Function("saxpy")
		require.NoError(t, err)
		x, err := gpu.Alloc[float32](s, 1024)
		require.NoError(t, err)
		y, err := gpu.Alloc[float32](s, 1024)
		require.NoError(t, err)
		tail, err := y.View(512, 1024)
		require.NoError(t, err)
		require.NoError(t, fn.Launch(gpu.Dim{X: 4}, gpu.Dim{X: 256}, 0, nil, tail, x, float32(2.5), 1024, int64(-1), float64(0.5)))
		require.Len(t, l.launches, 1)
		p := l.launches[0]
		assert.Equal(t, uint64(y.Ptr()+2048), p[0], "a view passes its own address")
		assert.Equal(t, uint64(x.Ptr()), p[1])
		assert.Equal(t, uint64(math.Float32bits(2.5)), p[2])
		assert.Equal(t, uint64(1024), p[3])
		assert.Equal(t, uint64(math.MaxUint64), p[4])
		assert.Equal(t, math.Float64bits(0.5), p[5])

		assert.Error(t, fn.Launch(gpu.Dim{X: 1}, gpu.Dim{X: 1}, 0, nil, "a string"))
		require.NoError(t, s.Free(x.Buffer))
		assert.ErrorIs(t, fn.Launch(gpu.Dim{X: 1}, gpu.Dim{X: 1}, 0, nil, y, x), gpu.ErrFreed, "a stale buffer fails the launch")
		assert.Len(t, l.launches, 1, "and nothing was launched")
		return nil
	}))
	assert.Empty(t, l.loaded, "the module was unloaded with its scope")
}

func TestModulesEndWithTheirScope(t *testing.T) {
	dev, l := openLauncher(t)
	var fn *gpu.Function
	var mod *gpu.Module
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		var err error
		mod, err = s.LoadModule([]byte("ptx"))
		require.NoError(t, err)
		fn, err = mod.Function("k")
		return err
	}))
	assert.ErrorIs(t, fn.Launch(gpu.Dim{X: 1}, gpu.Dim{X: 1}, 0, nil), gpu.ErrScopeClosed)
	_, err := mod.Function("k")
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	assert.Empty(t, l.launches)
}

func TestALaunchOnAStreamRecordsItsUseOfBuffers(t *testing.T) {
	dev, l := openLauncher(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		mod, err := s.LoadModule([]byte("ptx"))
		require.NoError(t, err)
		fn, err := mod.Function("k")
		require.NoError(t, err)
		b, err := s.Alloc(4096)
		require.NoError(t, err)
		release, err := l.Hold(st.ID())
		require.NoError(t, err)
		require.NoError(t, fn.Launch(gpu.Dim{X: 1}, gpu.Dim{X: 1}, 0, st, b))
		assert.Equal(t, []uintptr{st.ID()}, l.streams)
		require.NoError(t, s.Free(b))
		snap, err := dev.Snapshot()
		require.NoError(t, err)
		pending := 0
		for _, seg := range snap.Pool.Segments {
			for _, blk := range seg.Blocks {
				if blk.State == "pending" {
					pending++
				}
			}
		}
		assert.Equal(t, 1, pending, "b is not reused before st has passed the kernel")
		release()
		return nil
	}))
}

func TestTheHostDeviceRunsNoKernels(t *testing.T) {
	dev := openHost(t)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.LoadModule([]byte("ptx"))
		assert.ErrorIs(t, err, gpu.ErrNotSupported)
		return nil
	}))
}
