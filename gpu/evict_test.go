package gpu_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// slotSize is the size of the buffers these tests hold: the host device's
// page, so that a device of n pages holds exactly n of them.
const slotSize = 2 << 20

// load opens a long-lived scope with opts and fills a buffer of slotSize
// with the byte v in it.
func load(t testing.TB, dev *gpu.Device, v byte, opts ...gpu.ScopeOption) (*gpu.Scope, gpu.Buffer) {
	t.Helper()
	s, err := dev.NewScope(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	b, err := s.Alloc(slotSize)
	require.NoError(t, err)
	require.NoError(t, b.CopyFromHost(bytesOf(v, slotSize)))
	return s, b
}

func bytesOf(v byte, n int) []byte { return bytes.Repeat([]byte{v}, n) }

// holds asserts that b is live and holds the byte v throughout.
func holds(t testing.TB, b gpu.Buffer, v byte) {
	t.Helper()
	got := make([]byte, b.Size())
	require.NoError(t, b.CopyToHost(got))
	require.Equal(t, bytesOf(v, int(b.Size())), got)
}

// allocElsewhere allocates slotSize bytes in a new scope opened with
// opts, closed when the test ends, and returns the allocation's error.
func allocElsewhere(t testing.TB, dev *gpu.Device, opts ...gpu.ScopeOption) error {
	t.Helper()
	other, err := dev.NewScope(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, other.Close()) })
	_, err = other.Alloc(slotSize)
	return err
}

// openLimited opens a scope with a Limit of limit bytes, closed when the
// test ends.
func openLimited(t testing.TB, dev *gpu.Device, limit int64) *gpu.Scope {
	t.Helper()
	s, err := dev.NewScope(gpu.Limit(limit))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

func evicted(s *gpu.Scope) bool { return errors.Is(context.Cause(s.Context()), gpu.ErrEvicted) }

func TestEvictionTakesOnlyIdleEvictableScopes(t *testing.T) {
	t.Run("a scope in use and one not evictable are kept, an idle evictable one goes", func(t *testing.T) {
		dev := openHost(t, gpu.HostMemory(3*slotSize))
		busy, bb := load(t, dev, 1, gpu.Evictable(0))
		idle, _ := load(t, dev, 2, gpu.Evictable(0))
		pinned, pb := load(t, dev, 3)
		err := bb.Use(func(uintptr) error {
			// The allocating goroutine holds busy: it must neither evict it
			// nor wait for it.
			return allocElsewhere(t, dev)
		})
		require.NoError(t, err)
		assert.True(t, evicted(idle), "the idle evictable scope is evicted")
		assert.False(t, evicted(busy), "the scope in use is kept")
		holds(t, bb, 1)
		holds(t, pb, 3)
		assert.False(t, evicted(pinned))
	})
	t.Run("with no idle evictable scope the allocation fails, and OnOutOfMemory hears it", func(t *testing.T) {
		var heard []error
		dev := openHost(t, gpu.HostMemory(2*slotSize), gpu.OnOutOfMemory(func(err error) { heard = append(heard, err) }))
		_, bb := load(t, dev, 1, gpu.Evictable(0))
		_, pb := load(t, dev, 2)
		err := bb.Use(func(uintptr) error {
			return allocElsewhere(t, dev)
		})
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		assert.Len(t, heard, 1)
		holds(t, bb, 1)
		holds(t, pb, 2)
	})
	t.Run("a scope whose memory UseHost works on is kept", func(t *testing.T) {
		dev := openHost(t, gpu.HostMemory(2*slotSize))
		s, err := dev.NewScope(gpu.Evictable(0))
		require.NoError(t, err)
		defer s.Close()
		x, err := gpu.Alloc[byte](s, slotSize)
		require.NoError(t, err)
		load(t, dev, 2)
		err = x.UseHost(func(v []byte) error {
			v[0] = 9
			return allocElsewhere(t, dev)
		})
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		assert.False(t, evicted(s))
		require.NoError(t, x.UseHost(func(v []byte) error {
			assert.Equal(t, byte(9), v[0])
			return nil
		}))
	})
	t.Run("an allocation larger than the device evicts nothing", func(t *testing.T) {
		dev := openHost(t, gpu.HostMemory(2*slotSize))
		victim, _ := load(t, dev, 1, gpu.Evictable(0))
		other, err := dev.NewScope()
		require.NoError(t, err)
		defer other.Close()
		_, err = other.Alloc(3 * slotSize)
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		assert.False(t, evicted(victim))
	})
	t.Run("an allocation never evicts its own scope", func(t *testing.T) {
		dev := openHost(t, gpu.HostMemory(2*slotSize))
		s, b := load(t, dev, 1, gpu.Evictable(0))
		load(t, dev, 2)
		_, err := s.Alloc(slotSize)
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		holds(t, b, 1)
	})
	t.Run("a scope with an open child is kept", func(t *testing.T) {
		dev := openHost(t, gpu.HostMemory(2*slotSize))
		parent, b := load(t, dev, 1, gpu.Evictable(0))
		load(t, dev, 2)
		err := gpu.WithScope(parent.Context(), dev, func(*gpu.Scope) error {
			return allocElsewhere(t, dev)
		})
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		holds(t, b, 1)
	})
	t.Run("a scope's own Limit does not evict", func(t *testing.T) {
		dev := openHost(t, gpu.HostMemory(3*slotSize))
		victim, _ := load(t, dev, 1, gpu.Evictable(0))
		load(t, dev, 2)
		_, err := openLimited(t, dev, slotSize).Alloc(2 * slotSize)
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		assert.False(t, evicted(victim))
	})
}

func TestEvictionGoesByPriorityThenLeastRecentlyUsed(t *testing.T) {
	heard := 0 // OnOutOfMemory is for what eviction could not help
	dev := openHost(t, gpu.HostMemory(4*slotSize), gpu.OnOutOfMemory(func(error) { heard++ }))
	high, hb := load(t, dev, 1, gpu.Evictable(1), gpu.Name("high"))
	older, ob := load(t, dev, 2, gpu.Evictable(0), gpu.Name("older"))
	newer, _ := load(t, dev, 3, gpu.Evictable(0), gpu.Name("newer"))
	load(t, dev, 4)
	holds(t, hb, 1) // used last, but its priority keeps it longest
	holds(t, ob, 2) // used after newer: newer is now the least recently used
	want := []*gpu.Scope{newer, older, high}
	for i := range want {
		require.NoError(t, allocElsewhere(t, dev), "allocation %d", i)
		for j, other := range want {
			assert.Equal(t, j <= i, evicted(other), "after allocation %d, scope %s", i, other.Path())
		}
	}
	assert.Zero(t, heard, "OnOutOfMemory is not called where eviction made room")
	st := dev.Stats()
	assert.Equal(t, int64(3), st.Evictions)
	assert.Equal(t, int64(3*slotSize), st.EvictedBytes)
}

func TestAnEvictedScopeSaysSo(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(slotSize))
	var ctx context.Context
	var b gpu.Buffer
	loaded, done := make(chan struct{}), make(chan error)
	go func() {
		done <- gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			ctx = s.Context()
			var err error
			if b, err = s.Alloc(slotSize); err != nil {
				return err
			}
			loaded <- struct{}{}
			<-loaded // the other goroutine evicted it
			_, err = s.Alloc(512)
			require.ErrorIs(t, err, gpu.ErrEvicted, "an allocation in it")
			require.ErrorIs(t, context.Cause(s.Context()), gpu.ErrEvicted, "its Context, asked again")
			return nil
		}, gpu.Evictable(0), gpu.Name("model"))
	}()
	<-loaded
	require.NoError(t, allocElsewhere(t, dev))
	cause := context.Cause(ctx)
	require.ErrorIs(t, cause, gpu.ErrEvicted, "the cause on its context")
	assert.Contains(t, cause.Error(), `"model"`)
	require.ErrorIs(t, b.CopyToHost(make([]byte, 8)), gpu.ErrEvicted, "its buffer")
	require.ErrorIs(t, b.Use(func(uintptr) error { return nil }), gpu.ErrEvicted)
	loaded <- struct{}{}
	require.ErrorIs(t, <-done, gpu.ErrEvicted, "WithScope's result")
}

func TestAnEvictedModelLoadsAgain(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(slotSize))
	s, _ := load(t, dev, 7, gpu.Evictable(0))
	other, err := dev.NewScope(gpu.Evictable(0))
	require.NoError(t, err)
	_, err = other.Alloc(slotSize)
	require.NoError(t, err)
	require.True(t, evicted(s))
	require.NoError(t, s.Close(), "closing an evicted scope is closing an ended one")
	// Loading it again evicts the other in turn.
	_, b := load(t, dev, 7, gpu.Evictable(0))
	holds(t, b, 7)
	assert.True(t, evicted(other))
	require.NoError(t, other.Close())
}

// model is one goroutine's model in TestManyGoroutinesEvictAndReload: a
// scope that may be evicted at any moment it is idle, loaded again then.
type model struct {
	dev   *gpu.Device
	v     byte
	s     *gpu.Scope
	b     gpu.Buffer
	loads int
}

// ensure loads the model if it is not loaded, retrying while every other
// model is in use.
func (m *model) ensure() error {
	for m.s == nil || evicted(m.s) {
		if m.s != nil {
			if err := m.s.Close(); err != nil {
				return err
			}
		}
		s, err := m.dev.NewScope(gpu.Evictable(int(m.v % 2)))
		if err != nil {
			return err
		}
		m.s, m.loads = s, m.loads+1
		if m.b, err = s.Alloc(slotSize); err == nil {
			err = m.b.CopyFromHost(bytesOf(m.v, slotSize))
		}
		if err == nil {
			continue
		}
		// Out of memory while every other model was in use, or evicted
		// since: load it again.
		if !errors.Is(err, gpu.ErrOutOfMemory) && !evicted(s) {
			return err
		}
		if err := s.Close(); err != nil {
			return err
		}
		m.s = nil
	}
	return nil
}

// check reads the model inside Use: while it runs, nothing may evict it,
// so every byte is the model's own.
func (m *model) check() error {
	got := make([]byte, slotSize)
	err := m.b.Use(func(uintptr) error { return m.b.CopyToHost(got) })
	if err != nil && evicted(m.s) {
		// Evicted before Use began: ErrEvicted, or ErrFreed once the
		// handle's slot serves another allocation. Loaded again next round.
		return nil
	}
	if err != nil {
		return err
	}
	if n := bytes.Count(got, []byte{m.v}); n != len(got) {
		return fmt.Errorf("model %d reads %d bytes of another", m.v, len(got)-n)
	}
	return nil
}

func TestManyGoroutinesEvictAndReload(t *testing.T) {
	const models, fit, rounds = 6, 3, 10
	dev := openHost(t, gpu.HostMemory(fit*slotSize))
	var wg sync.WaitGroup
	errs := make(chan error, 2*models)
	ready := make(chan struct{})
	var loaded sync.WaitGroup // every model loaded once before any goes on
	loaded.Add(models)
	for i := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &model{dev: dev, v: byte(i + 1)}
			defer func() {
				if m.s != nil {
					errs <- m.s.Close()
				}
			}()
			err := m.ensure()
			loaded.Done()
			if err != nil {
				errs <- err
				return
			}
			<-ready
			for range rounds {
				if err := m.ensure(); err != nil {
					errs <- err
					return
				}
				if err := m.check(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	loaded.Wait()
	close(ready)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st := dev.Stats()
	assert.GreaterOrEqual(t, st.Evictions, int64(models-fit), "each model loaded once, and only %d fit", fit)
	assert.Equal(t, st.Evictions*slotSize, st.EvictedBytes)
}

func TestSummaryAndSnapshotShowEvictableScopes(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(2*slotSize))
	load(t, dev, 1, gpu.Evictable(3), gpu.Name("cache"))
	load(t, dev, 2, gpu.Name("weights"))
	snap, err := dev.Snapshot()
	require.NoError(t, err)
	byName := map[string]gpu.ScopeSnapshot{}
	for _, s := range snap.Scopes {
		byName[s.Name] = s
	}
	assert.True(t, byName["cache"].Evictable)
	assert.Equal(t, 3, byName["cache"].Priority)
	assert.False(t, byName["weights"].Evictable)
	assert.Contains(t, dev.Summary(), "evictable (priority 3)")
	assert.NotContains(t, dev.Summary(), "evicted")

	require.NoError(t, allocElsewhere(t, dev))
	assert.Contains(t, dev.Summary(), "evicted    1 scope (2.00 MiB) to make room")
}
