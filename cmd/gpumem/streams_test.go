package main

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

// streamingSource is a simulated source that, as a GPU's driver, knows
// only the streams it made.
type streamingSource struct {
	*sim.Source
	mu        sync.Mutex
	next      uintptr
	live      map[uintptr]bool
	destroyed int
}

func (s *streamingSource) NewStream() (uintptr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.live[1000+s.next] = true
	return 1000 + s.next, nil
}

func (s *streamingSource) DestroyStream(st uintptr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live[st] {
		return errors.New("no such stream")
	}
	delete(s.live, st)
	s.destroyed++
	return nil
}

func TestATraceOnStreamsReplaysOnStreamsTheSourceMade(t *testing.T) {
	events := []event{
		{Line: 2, Action: "alloc", Addr: 1, Size: 4096, Stream: 0},
		{Line: 3, Action: "alloc", Addr: 2, Size: 4096, Stream: 7},
		{Line: 4, Action: "alloc", Addr: 3, Size: 1 << 21, Stream: 9},
		{Line: 5, Action: "free_requested", Addr: 2, Size: 4096, Stream: 7},
		{Line: 6, Action: "alloc", Addr: 4, Size: 8192, Stream: 7},
	}
	src := &streamingSource{Source: sim.New(0, 0), live: map[uintptr]bool{}}
	msrc, m, err := newMeter(src, sim.H200)
	require.NoError(t, err)
	p, err := pool.New(msrc, pool.Shards(1))
	require.NoError(t, err)
	var mu sync.Mutex
	seen := map[uintptr]bool{}
	p.Observe(func(_ context.Context, alloc bool, b pool.Block) {
		mu.Lock()
		seen[b.Stream()] = true
		mu.Unlock()
	})
	res, err := replay(p, inMemory(events), m, 2, nil)
	require.NoError(t, err)
	assert.Equal(t, 4, res.Allocs/2)
	assert.Equal(t, map[uintptr]bool{0: true, 1001: true, 1002: true}, seen,
		"the trace's streams 7 and 9 ran on streams the source made, once each over both passes")
	require.NoError(t, m.streams.close(p))
	assert.Equal(t, 2, src.destroyed)
	assert.Empty(t, src.live)
	require.NoError(t, p.Close())
}
