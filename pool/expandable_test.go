package pool_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

const mib = 1 << 20

func TestAGrowthCostsThreeDriverCalls(t *testing.T) {
	src := sim.New(0, 0)
	p := newPool(t, src, pool.GrowthStep(0))
	assert.Equal(t, sim.Counts{Reserves: 2}, src.Counts(),
		"New reserves address space for the default stream's small and large blocks, and nothing else")
	b, err := p.Alloc(100 * mib)
	require.NoError(t, err)
	c := src.Counts()
	assert.Equal(t, sim.Counts{Reserves: 2, Creates: 1, Maps: 1, SetAccesses: 1}, c,
		"one handle created, mapped and made accessible")
	b2, err := p.Alloc(300 * mib)
	require.NoError(t, err)
	c = src.Counts()
	assert.Equal(t, sim.Counts{Reserves: 2, Creates: 2, Maps: 2, SetAccesses: 2}, c, "a second growth, of any size, is three more calls")
	assert.Equal(t, int64(400*mib), p.Stats().Reserved, "each growth takes exactly what it lacks")
	require.NoError(t, p.Free(b))
	require.NoError(t, p.Free(b2))
}

func TestGrowthStepsRoundGrowthUp(t *testing.T) {
	src := sim.New(0, 0)
	p := newPool(t, src, pool.GrowthStep(20*mib))
	b, err := p.Alloc(25 * mib)
	require.NoError(t, err)
	assert.Equal(t, int64(40*mib), p.Stats().Reserved, "a request of a step or more grows by whole steps")
	b2, err := p.Alloc(15 * mib)
	require.NoError(t, err)
	assert.Equal(t, int64(1), p.Stats().Growths, "the second request fits in what the first growth took")
	require.NoError(t, p.Free(b))
	require.NoError(t, p.Free(b2))
}

func TestARequestUnderAStepGrowsByRoomForTheNextOfItsSizeWhereMemoryIsPlentiful(t *testing.T) {
	src := sim.New(0, 0)
	p := newPool(t, src, pool.GrowthStep(20*mib))
	b, err := p.Alloc(12 * mib)
	require.NoError(t, err)
	assert.Equal(t, int64(40*mib), p.Stats().Reserved, "two steps: one holds one request of 12 MiB, not two")
	more := []pool.Block{b}
	for range 2 {
		b, err := p.Alloc(12 * mib)
		require.NoError(t, err)
		more = append(more, b)
	}
	assert.Equal(t, int64(1), p.Stats().Growths, "the next requests of that size fit in the same growth")
	for _, b := range more {
		require.NoError(t, p.Free(b))
	}

	t.Run("where one step holds two, one step", func(t *testing.T) {
		// Two steps for every request under one left a stream's arena of
		// mix a step above PyTorch expandable's (docs/measurements.md).
		p := newPool(t, sim.New(0, 0), pool.GrowthStep(20*mib))
		b, err := p.Alloc(3 * mib)
		require.NoError(t, err)
		assert.Equal(t, int64(20*mib), p.Stats().Reserved)
		require.NoError(t, p.Free(b))
	})
	t.Run("counting the free block the growth extends", func(t *testing.T) {
		p := newPool(t, sim.New(0, 0), pool.GrowthStep(20*mib))
		b, err := p.Alloc(36 * mib) // 40 MiB, 4 free at the end
		require.NoError(t, err)
		b2, err := p.Alloc(6 * mib) // 2 MiB lacking, 6 more for the next of its size
		require.NoError(t, err)
		assert.Equal(t, int64(60*mib), p.Stats().Reserved, "one step more, not two")
		require.NoError(t, p.Free(b))
		require.NoError(t, p.Free(b2))
	})
	t.Run("under a cap, one step", func(t *testing.T) {
		// A cap of 1 GiB bounds a handle to 8 MiB: two steps of 20 MiB
		// would be more than one handle may strand.
		src := sim.New(0, 0)
		p := newPool(t, src, pool.GrowthStep(20*mib), pool.MaxReserved(1<<30))
		b, err := p.Alloc(12 * mib)
		require.NoError(t, err)
		assert.Equal(t, int64(20*mib), p.Stats().Reserved)
		require.NoError(t, p.Free(b))
	})
}

func TestFreedLargeBlocksCoalesceBeforeTheArenaGrows(t *testing.T) {
	src := sim.New(0, 0)
	p := newPool(t, src, pool.GrowthStep(0))
	var bs []pool.Block
	for range 4 {
		b, err := p.Alloc(16 * mib)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	require.NoError(t, p.Free(bs[1]))
	require.NoError(t, p.Free(bs[2]))
	creates := src.Counts().Creates
	b, err := p.Alloc(32 * mib)
	require.NoError(t, err)
	assert.Equal(t, creates, src.Counts().Creates, "two freed neighbours serve a request of both their sizes")
	assert.Equal(t, bs[1].Ptr(), b.Ptr())
	for _, x := range []pool.Block{bs[0], bs[3], b} {
		require.NoError(t, p.Free(x))
	}
}

func TestBestFitKeepsTheBlockThatCanGrowForLast(t *testing.T) {
	p := newPool(t, sim.New(0, 0), pool.GrowthStep(0))
	a, err := p.Alloc(30 * mib)
	require.NoError(t, err)
	pin, err := p.Alloc(2 * mib)
	require.NoError(t, err)
	c, err := p.Alloc(20 * mib)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	require.NoError(t, p.Free(c)) // now free, and bordering unmapped space
	b, err := p.Alloc(10 * mib)
	require.NoError(t, err)
	assert.Equal(t, a.Ptr(), b.Ptr(), "the 30 MiB block serves it, though the 20 MiB one fits tighter")
	big, err := p.Alloc(40 * mib)
	require.NoError(t, err)
	assert.Equal(t, c.Ptr(), big.Ptr(), "the block at the end grows for the request that needs it")
	assert.Equal(t, int64(72*mib), p.Stats().Reserved, "20 MiB mapped there, no more")
	for _, x := range []pool.Block{pin, b, big} {
		require.NoError(t, p.Free(x))
	}
}

func TestARepeatingWorkloadMakesNoDriverCallsAfterItsFirstPass(t *testing.T) {
	src := sim.New(0, 0)
	p := newPool(t, src)
	type op struct {
		alloc bool
		size  int64
		which int
	}
	r := rand.New(rand.NewPCG(7, 8))
	var ops []op
	live := 0
	for range 3000 {
		if live == 0 || r.IntN(2) == 0 {
			ops = append(ops, op{alloc: true, size: int64(1 + r.IntN(64*mib))})
			live++
		} else {
			ops = append(ops, op{which: r.IntN(live)})
			live--
		}
	}
	pass := func() {
		var held []pool.Block
		for _, o := range ops {
			if o.alloc {
				b, err := p.Alloc(o.size)
				require.NoError(t, err)
				held = append(held, b)
				continue
			}
			require.NoError(t, p.Free(held[o.which]))
			held = append(held[:o.which], held[o.which+1:]...)
		}
		for _, b := range held {
			require.NoError(t, p.Free(b))
		}
	}
	pass()
	first := src.Counts()
	require.Positive(t, first.Creates)
	pass()
	pass()
	assert.Equal(t, first, src.Counts(), "the second and third passes find everything they need in the pool")
}

func TestALimitMovesMemoryInsteadOfCreatingIt(t *testing.T) {
	// Under 1 GiB a block of 128 MiB or more grows in pages of 2 MiB.
	p := newPool(t, sim.New(0, 0), pool.GrowthStep(0), pool.MaxReserved(1<<30))
	a, err := p.Alloc(200 * mib)
	require.NoError(t, err)
	pin, err := p.Alloc(2 * mib)
	require.NoError(t, err)
	fill, err := p.Alloc(700 * mib)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	b, err := p.Alloc(300 * mib)
	require.NoError(t, err, "200 MiB move from the freed block, 100 MiB are new")
	st := p.Stats()
	assert.Equal(t, int64(100), st.PagesMoved, "the freed block's 200 MiB moved")
	assert.Equal(t, int64(1002*mib), st.Reserved)
	assert.Zero(t, st.SourceFrees, "nothing went back to the source")
	require.NoError(t, p.CheckInvariants(nil))
	for _, b := range []pool.Block{b, pin, fill} {
		require.NoError(t, p.Free(b))
	}
}

func TestASmallRequestTheCapLeavesNoRoomForTakesTheLargeArenasFreeMemory(t *testing.T) {
	p := newPool(t, sim.New(0, 0), pool.GrowthStep(0), pool.MaxReserved(4*mib))
	large, err := p.Alloc(3 * mib / 2)
	require.NoError(t, err, "a handle of 2 MiB for the large arena, 512 KiB of it free")
	var small []pool.Block
	for range 2 {
		b, err := p.Alloc(mib)
		require.NoError(t, err, "a handle of 2 MiB for the small arena")
		small = append(small, b)
	}
	require.Equal(t, int64(4*mib), p.Stats().Reserved, "the cap is reached")
	b, err := p.Alloc(512 << 10)
	require.NoError(t, err, "the small arena cannot grow, and the large arena's free 512 KiB serve")
	assert.Equal(t, large.Ptr()+3*mib/2, b.Ptr(), "where the large block ends")
	assert.Equal(t, int64(4*mib), p.Stats().Reserved)
	require.NoError(t, p.CheckInvariants(nil))
	for _, b := range append(small, b, large) {
		require.NoError(t, p.Free(b))
	}
	require.NoError(t, p.EmptyCache())
	require.NoError(t, p.CheckInvariants(nil))
	assert.Zero(t, p.Stats().Reserved, "the lent block went back to the large arena, and the arena to the source")
}

func TestOnceMemoryIsShortLargeHandlesGoBackAndGrowthIsInPages(t *testing.T) {
	// Under 64 MiB a handle is 8 MiB, a page 2 MiB.
	src := &recordingSource{Source: sim.New(0, 0)}
	p := newPool(t, src, pool.GrowthStep(0), pool.MaxReserved(64*mib))
	a, err := p.Alloc(40 * mib)
	require.NoError(t, err)
	pin, err := p.Alloc(2 * mib)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	assert.Equal(t, []int64{8 * mib, 8 * mib, 8 * mib, 8 * mib, 8 * mib, 2 * mib}, src.created)
	src.created = nil
	b, err := p.Alloc(60 * mib)
	require.NoError(t, err, "past the cap: the freed block's handles go back, 60 MiB of pages are new")
	st := p.Stats()
	assert.Equal(t, int64(5), st.SourceFrees, "the five handles of 8 MiB under the freed block")
	assert.Zero(t, st.PagesMoved)
	assert.Len(t, src.created, 30)
	for _, n := range src.created {
		assert.Equal(t, int64(2*mib), n, "pages, once memory was short")
	}
	assert.Equal(t, int64(62*mib), st.Reserved)
	require.NoError(t, p.CheckInvariants(nil))
	require.NoError(t, p.Free(b))
	src.created = nil
	c, err := p.Alloc(20 * mib)
	require.NoError(t, err)
	assert.Empty(t, src.created, "freed pages serve the next request where they are")
	require.NoError(t, p.Free(c))

	t.Run("until the cap changes", func(t *testing.T) {
		require.NoError(t, p.SetMaxReserved(1<<30))
		src.created = nil
		d, err := p.Alloc(100 * mib)
		require.NoError(t, err)
		for _, n := range src.created {
			assert.Greater(t, n, int64(2*mib), "handles of 1/256 of the new cap again")
		}
		require.NoError(t, p.Free(d))
	})
	require.NoError(t, p.Free(pin))
}

func TestAFailedGrowthKeepsNothing(t *testing.T) {
	src := sim.New(64*mib, 0)
	p := newPool(t, src)
	_, err := p.Alloc(65 * mib)
	require.ErrorIs(t, err, pool.ErrOutOfMemory)
	assert.Zero(t, p.Stats().Reserved, "nothing was created for a request that failed")
	assert.Zero(t, src.Used())
	b, err := p.Alloc(64 * mib)
	require.NoError(t, err, "the whole device is still there")
	require.NoError(t, p.Free(b))
}

// A growth is cut into handles of at most 1/256 of the budget, created one
// after another; when a later one fails, the earlier ones must go back.
func TestAFailedGrowthOfSeveralHandlesGivesBackWhatItCreated(t *testing.T) {
	t.Run("when the device fills partway", func(t *testing.T) {
		src := sim.New(256*mib, 0)
		p := newPool(t, src, pool.GrowthStep(0))
		other, err := src.Alloc(200 * mib) // memory someone else holds
		require.NoError(t, err)
		free, _, err := src.MemInfo()
		require.NoError(t, err)
		_, err = p.Alloc(96 * mib) // 8 MiB handles: seven fit, the eighth does not
		require.ErrorIs(t, err, pool.ErrOutOfMemory)
		assert.Zero(t, p.Stats().Reserved, "the handles created before the one that failed are gone")
		after, _, err := src.MemInfo()
		require.NoError(t, err)
		assert.Equal(t, free, after, "the device's free memory is as it was")
		require.NoError(t, src.Free(other, 200*mib))
	})
	t.Run("when the growth would pass the cap", func(t *testing.T) {
		src := sim.New(0, 0)
		p := newPool(t, src, pool.GrowthStep(0), pool.MaxReserved(64*mib))
		keep, err := p.Alloc(40 * mib)
		require.NoError(t, err)
		reserved, used := p.Stats().Reserved, src.Used()
		_, err = p.Alloc(40 * mib) // three 8 MiB handles fit under the cap, five are needed
		require.ErrorIs(t, err, pool.ErrOutOfMemory)
		assert.Equal(t, reserved, p.Stats().Reserved, "nothing the failed growth created stays reserved")
		assert.Equal(t, used, src.Used(), "and the source holds what it held")
		require.NoError(t, p.CheckInvariants(src.Accessible))
		require.NoError(t, p.Free(keep))
	})
}

// GPT-2 small's weights (fp32), made one by one as PyTorch loads them:
// requests of sizes that differ, most of them under a step. Where each
// growth ended a whole number of steps after the last, the arena ended a
// step above PyTorch expandable's 20 MiB pages; growths that end on the
// pages' lines reserve what the pages do.
func TestAModelsWeightsLoadedOneByOneReserveNoMoreThanPyTorchsPages(t *testing.T) {
	const w = 768 * 4
	sizes := []int64{50257 * w, 1024 * w}
	for range 12 {
		sizes = append(sizes, w, w, 3*768*w, 3*w, 768*w, w, w, w, 4*768*w, 4*w, 4*768*w, w)
	}
	p := newPool(t, sim.New(h200Bytes, 0))
	m := sim.NewTorchExpandable(0)
	var bs []pool.Block
	for i, n := range sizes {
		b, err := p.Alloc(n)
		require.NoError(t, err)
		bs = append(bs, b)
		ok, err := m.Alloc(uint64(i+1), n, 0)
		require.NoError(t, err)
		require.True(t, ok)
	}
	assert.LessOrEqual(t, p.Stats().Reserved, m.Mapped())
	for _, b := range bs {
		require.NoError(t, p.Free(b))
	}
}
