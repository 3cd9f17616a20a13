package main

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func TestNoCollectionStartsWhileThePoolIsTimed(t *testing.T) {
	// Three chunks of allocations and frees; reading each allocates.
	var evs []event
	for i := range 3 * chunkEvents / 2 {
		evs = append(evs, event{Line: 2 * i, Action: "alloc", Addr: uint64(i), Size: 4096},
			event{Line: 2*i + 1, Action: "free_requested", Addr: uint64(i), Size: 4096})
	}
	src, m, err := newMeter(sim.New(0, 0), sim.H200)
	require.NoError(t, err)
	p, err := pool.New(src, pool.Shards(1))
	require.NoError(t, err)
	var inTimed, collections int
	var before runtime.MemStats
	defer func(c func() time.Time) { clock = c }(clock)
	clock = func() time.Time {
		// Called at the start and at the end of each timed part.
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if inTimed%2 == 1 && ms.NumGC != before.NumGC {
			collections++
		}
		before = ms
		inTimed++
		return time.Now()
	}
	_, err = replay(p, func() (events, func() error, error) {
		return &garbageEvents{sliceEvents{evs: evs}}, func() error { return nil }, nil
	}, m, 2, nil)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	assert.Positive(t, inTimed)
	assert.Zero(t, collections, "a collection ran while the pool was timed")
}

// garbageEvents reads events as a parser does: each one leaves garbage.
type garbageEvents struct{ sliceEvents }

var sink []byte

func (g *garbageEvents) Next() (event, error) {
	sink = make([]byte, 2048)
	return g.sliceEvents.Next()
}
