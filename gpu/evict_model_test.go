package gpu_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// modelScope is a scope of TestEvictionModel and what it must hold.
type modelScope struct {
	evictable bool
	priority  int
	onStream  bool // its allocations are ordered on the model's stream
	queued    bool // work on its buffers waits on the held stream: it is busy
	s         *gpu.Scope
	bufs      []gpu.Buffer
	fill      []byte // what each of bufs holds, every byte
}

// evictionModel runs random allocations, frees, allocations made while
// another scope is in use or has stream work queued behind a held stream,
// and checks after each step what eviction may and may not do.
type evictionModel struct {
	t       *testing.T
	dev     *gpu.Device
	faults  *gputest.Faults
	st      *gpu.Stream // the stream of the onStream scope, held at times
	release func()      // ends the hold; nil while st is not held
	stop    func() bool // stops the hold's end at the queued scope's eviction
	rng     *rand.Rand
	scopes  []*modelScope
	next    byte
}

func (m *evictionModel) open(ms *modelScope) {
	var opts []gpu.ScopeOption
	if ms.evictable {
		opts = append(opts, gpu.Evictable(ms.priority))
	}
	if ms.onStream {
		opts = append(opts, gpu.OnStream(m.st))
	}
	s, err := m.dev.NewScope(opts...)
	require.NoError(m.t, err)
	ms.s, ms.bufs, ms.fill, ms.queued = s, nil, nil, false
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

// queue holds the stream and queues work on the stream scope's buffers
// behind the hold (a memset that writes what they hold): that scope is
// busy until finish. The cache goes first: while the stream is held, an
// allocation that needed its cached memory would wait for it.
func (m *evictionModel) queue(ms *modelScope) {
	require.NoError(m.t, m.dev.EmptyCache())
	release, err := m.faults.Hold(m.st)
	require.NoError(m.t, err)
	m.release = release
	// Were the scope evicted, an allocation could wait for its memory
	// behind the hold: its eviction ends the hold, and checked reports it.
	m.stop = context.AfterFunc(ms.s.Context(), release)
	for i, b := range ms.bufs {
		require.NoError(m.t, b.Memset(ms.fill[i]))
	}
	ms.queued = true
}

// finish lets the held stream run and waits for its work.
func (m *evictionModel) finish() {
	if m.release == nil {
		return
	}
	m.stop()
	m.release()
	m.release = nil
	require.NoError(m.t, m.st.Synchronize())
	for _, ms := range m.scopes {
		ms.queued = false
	}
}

// step makes one random move: an allocation in a scope, possibly while
// another is in use, a free, or work queued on the stream scope (or the
// end of it). The stream scope is left alone while its stream is held.
func (m *evictionModel) step() {
	if m.release != nil && m.rng.IntN(12) == 0 {
		m.finish()
		return
	}
	if ms := m.scopes[0]; m.release == nil && len(ms.bufs) > 0 && m.rng.IntN(6) == 0 {
		m.queue(ms)
		return
	}
	self := m.scopes[m.rng.IntN(len(m.scopes))]
	if m.release == nil && m.rng.IntN(3) == 0 {
		self = m.scopes[0] // so that it holds memory when queue comes
	}
	if self.onStream && m.release != nil {
		return
	}
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
// checks that only idle evictable scopes other than these, with no stream
// work queued, were evicted,
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
		require.False(t, ms.queued, "a scope with stream work queued was evicted")
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
			// The stream scope counts as busy while its stream is held:
			// work others queued there keeps it until the device has
			// asked once, which it may not have.
			if ms.evictable && ms != self && ms != busy && !(ms.onStream && m.release != nil) {
				require.Zero(t, ms.s.Stats().Live, "an allocation failed while an idle evictable scope held memory")
			}
		}
	}
	m.verify()
}

// verify checks that every buffer of every scope holds what was written;
// those of the stream scope only while its stream runs (a copy there
// waits for the stream).
func (m *evictionModel) verify() {
	for _, ms := range m.scopes {
		if ms.onStream && m.release != nil {
			continue
		}
		for i, b := range ms.bufs {
			got := make([]byte, b.Size())
			require.NoError(m.t, b.CopyToHost(got))
			require.Equal(m.t, len(got), bytes.Count(got, []byte{ms.fill[i]}), "a byte of a kept scope was touched")
		}
	}
}

func TestEvictionModel(t *testing.T) {
	for seed := range uint64(3) {
		dev, faults := openFaultyHost(t, 4<<20)
		m := &evictionModel{t: t, dev: dev, faults: faults, st: streamOf(t, dev), rng: rand.New(rand.NewPCG(seed, 1))}
		for i := range 6 {
			// Scope 0 is evictable and on the stream that queue holds.
			ms := &modelScope{evictable: i%2 == 0, priority: i % 3, onStream: i == 0}
			m.open(ms)
			m.scopes = append(m.scopes, ms)
		}
		queued := 0
		for range 100 {
			m.step()
			if m.scopes[0].queued {
				queued++
			}
		}
		m.finish()
		require.Positive(t, m.dev.Stats().Evictions, "seed %d: the steps evict", seed)
		require.Positive(t, queued, "seed %d: the steps keep a scope busy with stream work", seed)
		for _, ms := range m.scopes {
			require.NoError(t, ms.s.Close())
		}
		require.Zero(t, eventsLeft(faults), "seed %d: the checks leave no event behind", seed)
	}
}
