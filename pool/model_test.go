package pool_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

// modelConfig is one way to set up a pool for the reference-model run.
type modelConfig struct {
	name     string
	capacity int64
	plain    bool // classic segments
	opts     []pool.Option
	// changingCap: the run also lowers, raises and removes MaxReserved
	// while blocks are live.
	changingCap bool
}

var modelConfigs = []modelConfig{
	{name: "expandable"},
	{name: "expandable under a capacity", capacity: 96 << 20},
	{name: "classic", plain: true},
	{name: "classic under a capacity", plain: true, capacity: 96 << 20},
	{name: "classic with max split", plain: true, opts: []pool.Option{pool.MaxSplitSize(30 << 20)}},
	{name: "expandable with a limit", opts: []pool.Option{pool.MaxReserved(64 << 20)}},
	{name: "expandable growing by what it lacks", capacity: 96 << 20, opts: []pool.Option{pool.GrowthStep(0)}},
	{name: "expandable growing in 64 MiB steps", opts: []pool.Option{pool.GrowthStep(64 << 20)}},
	{name: "classic with release threshold", plain: true, opts: []pool.Option{pool.ReleaseThreshold(4 << 20)}},
	{name: "expandable with a cap that changes while it runs", opts: []pool.Option{pool.MaxReserved(64 << 20)}, changingCap: true},
}

// modelRun applies a sequence of operations drawn from next to a pool and
// checks every invariant after each step. next returns values in [0, n).
// It returns the pool's final statistics and whether it ran under a
// MaxReserved limit.
func modelRun(t *testing.T, cfg modelConfig, steps int, next func(n int) int) (final pool.Stats, limited bool) {
	t.Helper()
	src := sim.New(cfg.capacity, 0)
	var s pool.Source = src
	if cfg.plain {
		s = src.Plain()
	}
	p, err := pool.New(s, append([]pool.Option{pool.Shards(2)}, cfg.opts...)...)
	require.NoError(t, err)
	var live []pool.Block
	owner := map[uintptr]pool.Block{} // every live byte range start, to catch reuse of a live address
	streams := []uintptr{0, 7}
	var reserved int64 // after the last step
	sizes := []int64{1, 500, 512, 4096, 100_000, 1 << 20, 1<<20 + 1, 3 << 20, 9 << 20, 21 << 20, 40<<20 + 123}
	for step := 0; step < steps; step++ {
		switch op := next(10); {
		case op < 5: // allocate
			size := sizes[next(len(sizes))]
			if next(4) == 0 {
				size = int64(next(6<<20)) + 1
			}
			stream := streams[next(len(streams))]
			b, err := p.AllocOn(size, stream)
			if err != nil {
				require.ErrorIs(t, err, pool.ErrOutOfMemory, "step %d", step)
				var oom *pool.OOMError
				require.ErrorAs(t, err, &oom)
				require.Equal(t, size, oom.Requested)
				break
			}
			require.Equal(t, size, b.Size())
			require.Equal(t, stream, b.Stream())
			_, taken := owner[b.Ptr()]
			require.False(t, taken, "step %d: address %#x handed out twice", step, b.Ptr())
			owner[b.Ptr()] = b
			live = append(live, b)
			if stream != 0 && next(3) == 0 {
				require.NoError(t, p.RecordUse(b, 0))
			}
		case op < 9: // free
			if len(live) == 0 {
				break
			}
			i := next(len(live))
			b := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			delete(owner, b.Ptr())
			require.NoError(t, p.Free(b), "step %d", step)
			require.ErrorIs(t, p.Free(b), pool.ErrInvalidBlock, "a double free must fail")
		default: // trim, make a stream busy or idle, or change the cap
			if cfg.changingCap && next(2) == 0 {
				caps := []int64{0, 24 << 20, 48 << 20, 96 << 20}
				c := caps[next(len(caps))]
				require.NoError(t, p.SetMaxReserved(c), "step %d", step)
				if c > 0 && reserved > c {
					require.NoError(t, p.CheckTrimmed(), "step %d: a cap below reserved gives back what is free", step)
				}
				break
			}
			switch next(3) {
			case 0:
				require.NoError(t, p.EmptyCache())
				require.NoError(t, p.CheckTrimmed(), "step %d", step)
			case 1:
				src.SetBusy(0, true)
			default:
				src.SetBusy(0, false)
			}
		}
		require.NoError(t, p.CheckInvariants(src.Accessible), "step %d", step)
		st := p.Stats()
		require.Equal(t, int64(len(live)), st.ActiveBlocks, "step %d", step)
		if cfg.capacity > 0 {
			require.LessOrEqual(t, src.Used(), cfg.capacity)
		}
		if lim := p.MaxReserved(); lim > 0 && st.Reserved > lim {
			// Only a cap lowered below live blocks leaves the pool above it,
			// and then it never grows.
			require.True(t, cfg.changingCap, "step %d: %d reserved over the cap of %d", step, st.Reserved, lim)
			require.LessOrEqual(t, st.Reserved, reserved, "step %d: grew while above the cap", step)
		}
		reserved = st.Reserved
	}
	src.SetBusy(0, false)
	final, limited = p.Stats(), p.MaxReserved() > 0
	for _, b := range live {
		require.NoError(t, p.Free(b))
	}
	require.NoError(t, p.Close())
	require.NoError(t, p.CheckInvariants(src.Accessible))
	allocs, pages, reserves, _ := src.Live()
	pend := p.Stats()
	if pend.Reserved == 0 {
		require.Zero(t, allocs, "segments left at the source")
		require.Zero(t, pages, "pages left at the source")
		require.Zero(t, reserves, "reservations left at the source")
	}
	return final, limited
}

func TestModelSeeded(t *testing.T) {
	steps := 3000
	if testing.Short() {
		steps = 500
	}
	for _, cfg := range modelConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(len(cfg.name))))
			final, limited := modelRun(t, cfg, steps, func(n int) int { return r.IntN(n) })
			// The seeded mix frees as it goes, so a run short of memory has
			// cache to release and free pages to move. A fuzzed sequence
			// need not (it may only allocate), so these hold for seeded runs.
			if cfg.capacity > 0 {
				assert.Positive(t, final.OOMs, "a capacity run must run out of memory")
				assert.Positive(t, final.Retries, "and retry after releasing the cache")
			}
			if !cfg.plain && (cfg.capacity > 0 || limited) {
				assert.Positive(t, final.PagesMoved, "an expandable run short of memory must move memory")
			}
		})
	}
}

func FuzzModel(f *testing.F) {
	f.Add(uint8(0), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(3), []byte{1, 1, 1, 1, 9, 9, 9, 0, 5, 5, 5, 5})
	f.Fuzz(func(t *testing.T, which uint8, ops []byte) {
		// Every step checks every invariant, so a step costs time linear in
		// the live blocks; a few hundred steps reach every state the model
		// has, and longer inputs only slow the fuzzer down.
		const maxSteps = 600
		ops = ops[:min(len(ops), maxSteps)]
		cfg := modelConfigs[int(which)%len(modelConfigs)]
		i := 0
		modelRun(t, cfg, len(ops), func(n int) int {
			if i >= len(ops) {
				return 0
			}
			v := int(ops[i])
			i++
			return v % n
		})
	})
}
