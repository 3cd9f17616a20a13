package pool_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/fuzzops"
	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

// fuzzSizes are the sizes the API fuzzer asks for: the bounds of what Alloc
// accepts, the edges of rounding and of the small arena, and the device.
var fuzzSizes = []int64{
	0, -1, -512, math.MinInt64, math.MaxInt64, pool.MaxSize, pool.MaxSize + 1,
	1, 511, 512, 513, 4096, 1 << 20, 1<<20 + 1, 3 << 20, 33<<20 + 7, 64 << 20, 64<<20 + 1,
}

// fuzzCaps are the caps SetMaxReserved is given, bad ones among them.
var fuzzCaps = []int64{0, -1, math.MinInt64, 1, 512, 8 << 20, 48 << 20, pool.MaxSize, math.MaxInt64}

// fuzzFractions are the fractions SetMaxReservedFraction is given.
var fuzzFractions = []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, -0.5, 1e-300, 0.25, 1, 1.0000001}

var errRefused = errors.New("refused by the charge")

// poolFuzz is one run of FuzzPoolAPI: a pool, what the test holds of it, and
// what its callbacks saw.
type poolFuzz struct {
	t      *testing.T
	src    *sim.Source
	p      *pool.Pool
	closed bool

	live    []pool.Block
	charged int64        // what the charge callbacks hold: the rounded bytes of live charged blocks
	stale   []pool.Block // freed blocks, whose memory may serve another by now

	mu       sync.Mutex
	observed map[pool.Block]bool // live blocks, as the observer saw them

	region      *pool.Region
	regionBlock pool.Block
	regionLive  map[uintptr]int64
	regionUsed  int64
}

// FuzzPoolAPI drives a pool through its public API with bad input mixed in:
// sizes out of range, a charge that refuses, double and stale frees, frees
// of the zero Block, caps and fractions out of range, a region carved from a
// block, Close in the middle. After every step the pool's invariants hold,
// its counters match what is live, every refusal matches its sentinel, and
// at the end nothing is left at the source.
func FuzzPoolAPI(f *testing.F) {
	f.Add(uint8(0), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add(uint8(1), []byte{0x10, 0x21, 0x02, 0x33, 0x44, 0x15, 0x05, 0x06, 0x0b, 0x0c, 0x09})
	f.Add(uint8(2), []byte{0x70, 0x81, 0x91, 0xa1, 0x81, 0xb1, 0x02, 0x0c, 0x07})
	f.Add(uint8(3), []byte{0x50, 0x60, 0x50, 0x0d, 0x00, 0x02, 0x03, 0x0d})
	f.Add(uint8('9'), []byte("0\xfc\xec\xec\xec\xecY107")) // a block used on stream 7, freed after Close
	for seed := range uint64(4) {
		f.Add(uint8(seed), fuzzops.Random(seed, 13, 400))
	}
	f.Fuzz(func(t *testing.T, cfg uint8, ops []byte) {
		prog := fuzzops.New(ops, 400)
		src := sim.New([]int64{0, 96 << 20}[cfg&1], 0)
		var s pool.Source = src
		if cfg&2 != 0 {
			s = src.Plain()
		}
		p, err := pool.New(s, pool.Shards(2))
		require.NoError(t, err)
		z := &poolFuzz{t: t, src: src, p: p, observed: map[pool.Block]bool{}}
		p.Observe(z.observe)
		for step := 0; !prog.Done(); step++ {
			z.step(step, prog.Next)
			z.check(step)
		}
		z.finish()
	})
}

func (z *poolFuzz) observe(_ context.Context, alloc bool, b pool.Block) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if alloc {
		if z.observed[b] {
			z.t.Errorf("observer: block %#x allocated twice", b.Ptr())
		}
		z.observed[b] = true
		return
	}
	if !z.observed[b] {
		z.t.Errorf("observer: block %#x freed but not live", b.Ptr())
	}
	delete(z.observed, b)
}

func (z *poolFuzz) step(step int, next func(int) int) {
	t, p := z.t, z.p
	size := func() int64 {
		if next(4) == 0 {
			return int64(next(1<<16))*97 + int64(next(512)) // sizes of any remainder
		}
		return fuzzSizes[next(len(fuzzSizes))]
	}
	stream := []uintptr{0, 7}[next(2)]
	switch op := next(14); op {
	case 0, 1: // allocate, charged or not
		n := size()
		var b pool.Block
		var err error
		refuse := false
		before := z.charged
		if op == 0 {
			b, err = p.AllocContext(context.Background(), n, stream)
		} else {
			refuse = next(3) == 0
			calls := 0
			b, err = p.AllocCharged(context.Background(), n, stream, func(bytes int64) error {
				calls++
				if calls == 1 && bytes != pool.Rounded(n) {
					t.Errorf("step %d: charged %d for %d bytes, not Rounded's %d", step, bytes, n, pool.Rounded(n))
				}
				if calls == 1 && refuse {
					return errRefused
				}
				z.charged += bytes
				return nil
			})
			if calls > 2 {
				t.Errorf("step %d: charge called %d times", step, calls)
			}
		}
		if err != nil {
			require.Equal(t, before, z.charged, "step %d: a failed allocation leaves its charge (%v)", step, err)
			switch {
			case n <= 0 || n > pool.MaxSize:
				require.ErrorIs(t, err, pool.ErrInvalidSize, "step %d: %d bytes", step, n)
			case z.closed:
				require.ErrorIs(t, err, pool.ErrClosed, "step %d", step)
			case refuse:
				require.ErrorIs(t, err, errRefused, "step %d", step)
			default:
				require.ErrorIs(t, err, pool.ErrOutOfMemory, "step %d: %d bytes", step, n)
			}
			require.True(t, b == pool.Block{}, "step %d: a failed allocation returns the zero Block", step)
			return
		}
		require.False(t, n <= 0 || n > pool.MaxSize, "step %d: %d bytes allocated", step, n)
		require.False(t, z.closed, "step %d: allocated after Close", step)
		require.False(t, refuse, "step %d: allocated though the charge refused", step)
		require.Equal(t, n, b.Size())
		require.Equal(t, stream, b.Stream())
		require.Zero(t, b.Ptr()%pool.Alignment)
		z.live = append(z.live, b)
		if op == 1 {
			require.Equal(t, before+pool.Rounded(n), z.charged, "step %d: the charge of %d bytes", step, n)
		}
	case 2, 3: // free a live block, then again
		if len(z.live) == 0 {
			return
		}
		k := next(len(z.live))
		b := z.live[k]
		if b == z.regionBlock && z.region != nil {
			return // the region's memory: freed with the region
		}
		z.live = append(z.live[:k], z.live[k+1:]...)
		require.NoError(t, p.Free(b), "step %d", step)
		require.ErrorIs(t, p.Free(b), pool.ErrInvalidBlock, "step %d: a double free", step)
		z.stale = append(z.stale, b)
	case 4: // stale and zero blocks: every use fails and changes nothing
		require.ErrorIs(t, p.Free(pool.Block{}), pool.ErrInvalidBlock)
		require.ErrorIs(t, p.RecordUse(pool.Block{}, 7), pool.ErrInvalidBlock)
		require.ErrorIs(t, p.WaitForUses(pool.Block{}, 0), pool.ErrInvalidBlock)
		if len(z.stale) > 0 {
			b := z.stale[next(len(z.stale))]
			require.ErrorIs(t, p.Free(b), pool.ErrInvalidBlock, "step %d: a stale free", step)
			require.ErrorIs(t, p.RecordUse(b, 7), pool.ErrInvalidBlock, "step %d: a stale RecordUse", step)
		}
	case 5: // record a use on another stream
		if len(z.live) == 0 {
			return
		}
		b := z.live[next(len(z.live))]
		require.NoError(t, p.RecordUse(b, []uintptr{0, 7, 9}[next(3)]), "step %d", step)
	case 6: // change the cap
		c := fuzzCaps[next(len(fuzzCaps))]
		before := p.MaxReserved()
		err := p.SetMaxReserved(c)
		switch {
		case c < 0 || c > 0 && c < sim.DefaultPageSize: // below one page, no allocation could fit
			require.ErrorIs(t, err, pool.ErrInvalidSize, "step %d", step)
			require.Equal(t, before, p.MaxReserved(), "step %d: a refused cap changes nothing", step)
		case z.closed:
			require.ErrorIs(t, err, pool.ErrClosed, "step %d", step)
			require.Equal(t, before, p.MaxReserved(), "step %d: a refused cap changes nothing", step)
		default:
			require.NoError(t, err, "step %d", step)
			require.Equal(t, c, p.MaxReserved())
		}
	case 7: // change the cap as a fraction
		fr := fuzzFractions[next(len(fuzzFractions))]
		before := p.MaxReserved()
		err := p.SetMaxReservedFraction(fr)
		if !(fr > 0 && fr <= 1) {
			require.ErrorIs(t, err, pool.ErrInvalidSize, "step %d: fraction %v", step, fr)
		}
		if err != nil {
			require.Equal(t, before, p.MaxReserved(), "step %d: a refused fraction changes nothing", step)
		} else {
			require.Positive(t, p.MaxReserved())
		}
	case 8:
		err := p.EmptyCache()
		require.NoError(t, err, "step %d", step)
	case 9: // a region over a live block
		z.regionOp(step, next)
	case 10: // peaks
		p.ResetPeaks()
		st := p.Stats()
		require.Equal(t, st.Allocated, st.PeakAllocated, "step %d", step)
		require.Equal(t, st.Reserved, st.PeakReserved, "step %d", step)
	case 11: // a snapshot agrees with Stats
		sn := p.Snapshot()
		var allocated int64
		var n int64
		for _, seg := range sn.Segments {
			for _, bi := range seg.Blocks {
				if bi.State == pool.BlockAllocated {
					allocated += bi.Size
					n++
				}
			}
		}
		require.Equal(t, sn.Stats.Allocated, allocated, "step %d", step)
		require.Equal(t, sn.Stats.ActiveBlocks, n, "step %d", step)
	case 12: // blocks allocated and freed by several goroutines at once
		z.concurrent(step, next(8)+1, size())
	case 13:
		if next(4) != 0 || z.closed {
			return
		}
		err := p.Close()
		if len(z.live) > 0 {
			require.Error(t, err, "step %d: Close with %d live blocks", step, len(z.live))
		} else {
			require.NoError(t, err, "step %d", step)
		}
		z.closed = true
		require.NoError(t, p.Close(), "step %d: Close is idempotent", step)
	}
}

// regionOp makes, uses or ends a region carved from a live block.
func (z *poolFuzz) regionOp(step int, next func(int) int) {
	t := z.t
	if z.region == nil {
		if len(z.live) == 0 {
			return
		}
		b := z.live[next(len(z.live))]
		sizes := []int64{b.Size(), 0, -1, 511, 512, pool.MaxSize + 1}
		n := min(sizes[next(len(sizes))], b.Size())
		r, err := pool.NewRegion(b.Ptr(), n)
		if n < 512 {
			require.ErrorIs(t, err, pool.ErrInvalidSize, "step %d: a region of %d bytes", step, n)
			return
		}
		require.NoError(t, err)
		z.region, z.regionBlock, z.regionLive, z.regionUsed = r, b, map[uintptr]int64{}, 0
		return
	}
	r := z.region
	switch next(4) {
	case 0:
		n := fuzzSizes[next(len(fuzzSizes))]
		if next(2) == 0 {
			n = int64(next(4096)) + 1
		}
		ptr, rounded, ok := r.Alloc(n)
		if !ok {
			require.Zero(t, ptr)
			require.Zero(t, rounded)
			return
		}
		require.True(t, n > 0 && n <= z.regionBlock.Size(), "step %d: a region allocated %d bytes", step, n)
		require.GreaterOrEqual(t, rounded, pool.Rounded(n), "step %d", step)
		require.GreaterOrEqual(t, ptr, z.regionBlock.Ptr())
		require.LessOrEqual(t, ptr+uintptr(rounded), z.regionBlock.Ptr()+uintptr(z.regionBlock.Size()), "step %d: past the region", step)
		for q, m := range z.regionLive {
			require.False(t, ptr < q+uintptr(m) && q < ptr+uintptr(rounded), "step %d: overlaps %#x", step, q)
		}
		z.regionLive[ptr] = rounded
		z.regionUsed += rounded
	case 1:
		for q := range z.regionLive {
			require.NoError(t, r.Free(q))
			delete(z.regionLive, q)
			require.ErrorIs(t, r.Free(q), pool.ErrInvalidBlock, "step %d: a double free", step)
			break
		}
		z.regionUsed = 0
		for _, m := range z.regionLive {
			z.regionUsed += m
		}
	case 2:
		bad := []uintptr{0, z.regionBlock.Ptr() + 1, z.regionBlock.Ptr() + 512, ^uintptr(0)}
		q := bad[next(len(bad))]
		if _, ok := z.regionLive[q]; !ok {
			require.ErrorIs(t, r.Free(q), pool.ErrInvalidBlock, "step %d", step)
		}
	default:
		closed := r.CloseIfEmpty()
		require.Equal(t, len(z.regionLive) == 0, closed, "step %d", step)
		if closed {
			require.False(t, r.CloseIfEmpty(), "step %d: true exactly once", step)
			_, _, ok := r.Alloc(512)
			require.False(t, ok, "step %d: a closed region allocates", step)
			z.region, z.regionBlock = nil, pool.Block{}
		}
	}
}

// concurrent allocates n blocks of size from n goroutines at once and frees
// half of them from other goroutines, twice each.
func (z *poolFuzz) concurrent(step, n int, size int64) {
	t, p := z.t, z.p
	blocks := make([]pool.Block, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() { blocks[k], errs[k] = p.Alloc(size) })
	}
	wg.Wait()
	var freeErrs [2][]error
	freeErrs[0], freeErrs[1] = make([]error, n), make([]error, n)
	for k := range n {
		if errs[k] != nil {
			if size > 0 && size <= pool.MaxSize && !z.closed {
				require.ErrorIs(t, errs[k], pool.ErrOutOfMemory, "step %d", step)
			}
			continue
		}
		if k%2 == 0 {
			for j := range 2 {
				wg.Go(func() { freeErrs[j][k] = p.Free(blocks[k]) })
			}
		} else {
			z.live = append(z.live, blocks[k])
		}
	}
	wg.Wait()
	for k := range n {
		if errs[k] != nil || k%2 != 0 {
			continue
		}
		// Exactly one of the two frees of a block succeeds.
		a, b := freeErrs[0][k], freeErrs[1][k]
		require.True(t, (a == nil) != (b == nil), "step %d: frees of one block returned %v and %v", step, a, b)
		if a != nil {
			require.ErrorIs(t, a, pool.ErrInvalidBlock)
		} else {
			require.ErrorIs(t, b, pool.ErrInvalidBlock)
		}
		z.stale = append(z.stale, blocks[k])
	}
}

func (z *poolFuzz) check(step int) {
	t, p := z.t, z.p
	require.NoError(t, p.CheckInvariants(z.src.Accessible), "step %d", step)
	st := p.Stats()
	require.Equal(t, int64(len(z.live)), st.ActiveBlocks, "step %d", step)
	var requested, rounded int64
	for _, b := range z.live {
		requested += b.Size()
		rounded += pool.Rounded(b.Size())
	}
	require.Equal(t, requested, st.Requested, "step %d", step)
	require.GreaterOrEqual(t, st.Allocated, rounded, "step %d", step)
	require.Equal(t, st.Reserved-st.Allocated, st.Cached, "step %d", step)
	require.LessOrEqual(t, st.Allocated, st.Reserved, "step %d", step)
	z.mu.Lock()
	require.Len(t, z.observed, len(z.live), "step %d: the observer's live blocks", step)
	z.mu.Unlock()
	if z.region != nil {
		require.Equal(t, z.regionUsed, z.region.Used(), "step %d: the region's used bytes", step)
	}
}

// finish frees everything, closes the pool and checks that the source holds
// nothing.
func (z *poolFuzz) finish() {
	t, p := z.t, z.p
	if z.region != nil {
		for q := range z.regionLive {
			require.NoError(t, z.region.Free(q))
		}
		require.True(t, z.region.CloseIfEmpty())
	}
	for _, b := range z.live {
		require.NoError(t, p.Free(b))
	}
	z.live = nil
	require.Zero(t, p.Stats().Allocated)
	require.NoError(t, p.Close())
	require.NoError(t, p.EmptyCache())
	require.Zero(t, p.Stats().Reserved, "reserved after Close with nothing live")
	allocs, handles, reserves, events := z.src.Live()
	require.Zero(t, allocs, "segments left at the source")
	require.Zero(t, handles, "handles left at the source")
	require.Zero(t, reserves, "address reservations left at the source")
	require.Zero(t, events, "events left at the source")
	_, err := p.Alloc(512)
	require.ErrorIs(t, err, pool.ErrClosed)
}
