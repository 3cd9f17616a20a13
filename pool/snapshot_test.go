package pool_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func TestSnapshotShowsEveryByteReserved(t *testing.T) {
	for name, src := range map[string]pool.Source{"expandable": sim.New(0, 0), "classic": sim.New(0, 0).Plain()} {
		t.Run(name, func(t *testing.T) {
			p := newPool(t, src, pool.MaxReserved(1<<30))
			var live []pool.Block
			for _, n := range []int64{100, 4096, 3 << 20, 40 << 20, 700, 12 << 20} {
				b, err := p.Alloc(n)
				require.NoError(t, err)
				live = append(live, b)
			}
			require.NoError(t, p.Free(live[1])) // small: cached
			require.NoError(t, p.Free(live[3])) // large: free in its arena
			snap := p.Snapshot()
			data, err := json.Marshal(snap)
			require.NoError(t, err)
			var back pool.Snapshot
			require.NoError(t, json.Unmarshal(data, &back))
			assert.Equal(t, snap, back, "it round-trips through JSON")

			var mapped, requested int64
			states := map[string]int{}
			for _, s := range snap.Segments {
				at := s.Address
				for _, b := range s.Blocks {
					assert.Equal(t, at, b.Address, "blocks tile their segment")
					at += uintptr(b.Size)
					states[b.State]++
					if b.State != pool.BlockUnmapped {
						mapped += b.Size
					}
					requested += b.Requested
				}
				assert.Equal(t, s.Address+uintptr(s.Size), at)
			}
			assert.Equal(t, snap.Stats.Reserved, mapped+snap.IdleBytes, "the blocks add up to what is reserved")
			assert.Equal(t, snap.Stats.Requested, requested)
			assert.Equal(t, 4, states[pool.BlockAllocated])
			assert.Equal(t, 1, states[pool.BlockCached])
			assert.Positive(t, states[pool.BlockFree])
			for _, i := range []int{0, 2, 4, 5} {
				require.NoError(t, p.Free(live[i]))
			}
		})
	}
}

// gatedSource holds its next Alloc until gate is closed, after telling
// entered.
type gatedSource struct {
	pool.Source
	entered, gate chan struct{}
}

func (g *gatedSource) Alloc(size int64) (uintptr, error) {
	close(g.entered)
	<-g.gate
	return g.Source.Alloc(size)
}

// waitBlockedIn waits until a goroutine is blocked on a mutex inside fn.
func waitBlockedIn(fn string) {
	buf := make([]byte, 1<<20)
	for {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, fn) && strings.Contains(g, "sync.(*Mutex).Lock") {
				return
			}
		}
		runtime.Gosched()
	}
}

func TestASnapshotIsOneMomentUnderConcurrentGrowth(t *testing.T) {
	src := &gatedSource{Source: sim.New(0, 0).Plain(), entered: make(chan struct{}), gate: make(chan struct{})}
	p := newPool(t, src)
	grown := make(chan pool.Block)
	go func() {
		b, err := p.Alloc(8 << 20)
		assert.NoError(t, err)
		grown <- b
	}()
	<-src.entered // the pool is growing, inside the source
	snapped := make(chan pool.Snapshot)
	go func() { snapped <- p.Snapshot() }()
	waitBlockedIn("pool.(*Pool).Snapshot")
	close(src.gate)
	snap := <-snapped
	require.NoError(t, p.Free(<-grown))

	var mapped int64
	for _, s := range snap.Segments {
		for _, b := range s.Blocks {
			mapped += b.Size
		}
	}
	assert.Equal(t, snap.Stats.Reserved, mapped, "the blocks add up to what its stats say is reserved")
}
