package pool_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/pool/sim"
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
