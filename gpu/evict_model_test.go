package gpu_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// modelScope is a scope of TestEvictionModel and what it must hold.
type modelScope struct {
	evictable bool
	priority  int
	s         *gpu.Scope
	bufs      []gpu.Buffer
	fill      []byte // what each of bufs holds, every byte
}

// evictionModel runs random allocations, frees and allocations made while
// another scope is in use, and checks after each step what eviction may
// and may not do.
type evictionModel struct {
	t      *testing.T
	dev    *gpu.Device
	rng    *rand.Rand
	scopes []*modelScope
	next   byte
}

func (m *evictionModel) open(ms *modelScope) {
	var opts []gpu.ScopeOption
	if ms.evictable {
		opts = append(opts, gpu.Evictable(ms.priority))
	}
	s, err := m.dev.NewScope(opts...)
	require.NoError(m.t, err)
	ms.s, ms.bufs, ms.fill = s, nil, nil
}

// alloc allocates in ms, filling the buffer with a byte of its own, and
// reports the error.
func (m *evictionModel) alloc(ms *modelScope) error {
	sizes := []int64{512, 4 << 10, 64 << 10, 256 << 10, 1 << 20}
	b, err := ms.s.Alloc(sizes[m.rng.IntN(len(sizes))])
	if err != nil {
		return err
	}
	m.next++
	require.NoError(m.t, b.CopyFromHost(bytes.Repeat([]byte{m.next}, int(b.Size()))))
	ms.bufs, ms.fill = append(ms.bufs, b), append(ms.fill, m.next)
	return nil
}

// step makes one random move: an allocation in a scope, possibly while
// another is in use, or a free.
func (m *evictionModel) step() {
	self := m.scopes[m.rng.IntN(len(m.scopes))]
	if m.rng.IntN(4) == 0 && len(self.bufs) > 0 {
		i := m.rng.IntN(len(self.bufs))
		require.NoError(m.t, self.s.Free(self.bufs[i]))
		self.bufs, self.fill = append(self.bufs[:i], self.bufs[i+1:]...), append(self.fill[:i], self.fill[i+1:]...)
		return
	}
	busy := m.scopes[m.rng.IntN(len(m.scopes))]
	if busy == self || len(busy.bufs) == 0 || m.rng.IntN(2) == 0 {
		m.checked(self, nil, func() error { return m.alloc(self) })
		return
	}
	require.NoError(m.t, busy.bufs[0].Use(func(uintptr) error {
		m.checked(self, busy, func() error { return m.alloc(self) })
		return nil
	}))
}

// checked runs an allocation in self, with busy in use (or nil), and
// checks that only idle evictable scopes other than these were evicted,
// that the evictions freed exactly their bytes, and that an allocation
// that failed left no idle evictable scope holding memory.
func (m *evictionModel) checked(self, busy *modelScope, alloc func() error) {
	t := m.t
	live := make([]int64, len(m.scopes))
	for i, ms := range m.scopes {
		live[i] = ms.s.Stats().Live
	}
	before := m.dev.Stats()
	err := alloc()
	after := m.dev.Stats()
	var evictedBytes, evictions int64
	for i, ms := range m.scopes {
		if !evicted(ms.s) {
			continue
		}
		require.True(t, ms.evictable, "a scope that is not evictable was evicted")
		require.NotSame(t, busy, ms, "a scope in use was evicted")
		require.NotSame(t, self, ms, "an allocation evicted its own scope")
		evictedBytes += live[i]
		evictions++
		require.NoError(t, ms.s.Close())
		m.open(ms) // its owner loads it again: empty, here
	}
	require.Equal(t, evictions, after.Evictions-before.Evictions)
	require.Equal(t, evictedBytes, after.EvictedBytes-before.EvictedBytes, "an eviction frees exactly the scope's bytes")
	if err != nil {
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		for _, ms := range m.scopes {
			if ms.evictable && ms != self && ms != busy {
				require.Zero(t, ms.s.Stats().Live, "an allocation failed while an idle evictable scope held memory")
			}
		}
	}
	m.verify()
}

// verify checks that every buffer of every scope holds what was written.
func (m *evictionModel) verify() {
	for _, ms := range m.scopes {
		for i, b := range ms.bufs {
			got := make([]byte, b.Size())
			require.NoError(m.t, b.CopyToHost(got))
			require.Equal(m.t, len(got), bytes.Count(got, []byte{ms.fill[i]}), "a byte of a kept scope was touched")
		}
	}
}

func TestEvictionModel(t *testing.T) {
	for seed := range uint64(3) {
		m := &evictionModel{t: t, dev: openHost(t, gpu.HostMemory(4<<20)), rng: rand.New(rand.NewPCG(seed, 1))}
		for i := range 6 {
			ms := &modelScope{evictable: i%2 == 0, priority: i % 3}
			m.open(ms)
			m.scopes = append(m.scopes, ms)
		}
		for range 100 {
			m.step()
		}
		require.Positive(t, m.dev.Stats().Evictions, "seed %d: the steps evict", seed)
		for _, ms := range m.scopes {
			require.NoError(t, ms.s.Close())
		}
	}
}
