package pool_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func newPool(t *testing.T, src pool.Source, opts ...pool.Option) *pool.Pool {
	t.Helper()
	p, err := pool.New(src, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close(), "a second Close is a no-op") })
	return p
}

func TestBadSizesAreRefused(t *testing.T) {
	p := newPool(t, sim.New(0, 0))
	for _, n := range []int64{0, -1, math.MinInt64, pool.MaxSize + 1, math.MaxInt64} {
		_, err := p.Alloc(n)
		assert.ErrorIs(t, err, pool.ErrInvalidSize, "size %d", n)
	}
	assert.Zero(t, p.Stats().Reserved, "a refused size reserves nothing")
}

func TestBadFreesChangeNothing(t *testing.T) {
	p := newPool(t, sim.New(0, 0), pool.Shards(1)) // one shard: the freed block is the one found next
	other := newPool(t, sim.New(0, 0))
	b, err := p.Alloc(100)
	require.NoError(t, err)
	ob, err := other.Alloc(100)
	require.NoError(t, err)

	assert.ErrorIs(t, p.Free(pool.Block{}), pool.ErrInvalidBlock, "the zero Block")
	assert.True(t, pool.Block{}.IsZero())
	assert.False(t, b.IsZero())
	assert.ErrorIs(t, p.Free(ob), pool.ErrInvalidBlock, "a block of another pool")
	require.NoError(t, p.Free(b))
	assert.ErrorIs(t, p.Free(b), pool.ErrInvalidBlock, "a double free")

	again, err := p.Alloc(100)
	require.NoError(t, err)
	assert.Equal(t, b.Ptr(), again.Ptr(), "the cache serves the same block")
	assert.ErrorIs(t, p.Free(b), pool.ErrInvalidBlock, "a stale handle to a reused block")
	assert.Equal(t, int64(1), p.Stats().ActiveBlocks, "the stale free must not free the new owner's block")
	require.NoError(t, p.Free(again))
	require.NoError(t, other.Free(ob))
}

func TestOutOfMemoryReleasesTheCacheRetriesThenReports(t *testing.T) {
	for name, plain := range map[string]bool{"expandable": false, "classic": true} {
		t.Run(name, func(t *testing.T) {
			src := sim.New(64<<20, 0)
			var s pool.Source = src
			if plain {
				s = src.Plain()
			}
			p := newPool(t, s)
			a, err := p.Alloc(30 << 20)
			require.NoError(t, err)
			pinSize := int64(2 << 20) // after a in the same expandable arena
			if plain {
				pinSize = 512 // in a small segment of its own
			}
			pin, err := p.Alloc(pinSize)
			require.NoError(t, err)
			require.NoError(t, p.Free(a))
			// 50 MiB fits only once the cached 30 MiB are reused: moved
			// or released pages, or a released segment and a retry.
			b, err := p.Alloc(50 << 20)
			require.NoError(t, err)
			st := p.Stats()
			assert.Positive(t, st.Retries+st.PagesMoved+st.SourceFrees, "the cache had to be reused")
			require.NoError(t, p.Free(pin))

			_, err = p.Alloc(40 << 20)
			require.ErrorIs(t, err, pool.ErrOutOfMemory)
			var oom *pool.OOMError
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, int64(40<<20), oom.Requested)
			assert.Equal(t, int64(64<<20), oom.DeviceTotal)
			assert.GreaterOrEqual(t, oom.Allocated, int64(50<<20))
			assert.ErrorIs(t, err, sim.ErrOutOfMemory, "the source's own error is kept")
			assert.Contains(t, err.Error(), "tried to allocate 40.00 MiB")
			assert.Equal(t, int64(1), p.Stats().OOMs)
			require.NoError(t, p.Free(b))
		})
	}
}

func TestLimitIsNeverExceeded(t *testing.T) {
	src := sim.New(1<<30, 0)
	p := newPool(t, src, pool.MaxReservedFraction(0.25))
	assert.Equal(t, int64(256<<20), p.MaxReserved())
	b, err := p.Alloc(200 << 20)
	require.NoError(t, err)
	_, err = p.Alloc(100 << 20)
	var oom *pool.OOMError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, int64(256<<20), oom.Limit)
	assert.LessOrEqual(t, p.Stats().PeakReserved, int64(256<<20))
	require.NoError(t, p.Free(b))
}

func TestEmptyCacheReturnsEverythingUnused(t *testing.T) {
	for name, plain := range map[string]bool{"expandable": false, "classic": true} {
		t.Run(name, func(t *testing.T) {
			src := sim.New(0, 0)
			var s pool.Source = src
			if plain {
				s = src.Plain()
			}
			p := newPool(t, s)
			keep, err := p.Alloc(1 << 20)
			require.NoError(t, err)
			for _, n := range []int64{512, 3 << 20, 40 << 20} {
				b, err := p.Alloc(n)
				require.NoError(t, err)
				require.NoError(t, p.Free(b))
			}
			require.NoError(t, p.EmptyCache())
			require.NoError(t, p.CheckTrimmed())
			st := p.Stats()
			assert.LessOrEqual(t, st.Reserved, int64(20<<20), "only what holds the live block stays")
			assert.Equal(t, st.Reserved, src.Used())
			require.NoError(t, p.Free(keep))
			require.NoError(t, p.EmptyCache())
			assert.Zero(t, p.Stats().Reserved)
			assert.Zero(t, src.Used())
		})
	}
}

func TestReleaseThresholdBoundsTheCache(t *testing.T) {
	src := sim.New(0, 0)
	p := newPool(t, src.Plain(), pool.ReleaseThreshold(0))
	b, err := p.Alloc(30 << 20)
	require.NoError(t, err)
	require.NoError(t, p.Free(b))
	assert.Zero(t, p.Stats().Reserved)
	assert.Equal(t, int64(1), p.Stats().SourceFrees)
}

// plainNoEvents is a source with neither pages nor events.
type plainNoEvents struct{ s *sim.Source }

func (p plainNoEvents) Alloc(n int64) (uintptr, error) { return p.s.Alloc(n) }

func (p plainNoEvents) Free(ptr uintptr, n int64) error { return p.s.Free(ptr, n) }

func (p plainNoEvents) MemInfo() (int64, int64, error) { return p.s.MemInfo() }

func TestTheFrontCacheHandsOutOnlyTheBlockItCachedLast(t *testing.T) {
	p := newPool(t, sim.New(0, 0), pool.Shards(1))
	a, err := p.Alloc(1000)
	require.NoError(t, err)
	b, err := p.Alloc(1000)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	require.NoError(t, p.Free(b))
	c, err := p.Alloc(1000)
	require.NoError(t, err)
	assert.Equal(t, b.Ptr(), c.Ptr())
	assert.Equal(t, int64(1), p.Stats().CacheHits, "the block freed last is a hit")
	d, err := p.Alloc(1000)
	require.NoError(t, err)
	assert.Equal(t, int64(1), p.Stats().CacheHits, "the one freed before it is not: the arena's best fit places the request")
	assert.Equal(t, a.Ptr(), d.Ptr(), "here where it lay, the smallest free block")
	require.NoError(t, p.Free(c))
	require.NoError(t, p.Free(d))
}

func TestAnotherShardHandsOutOnlyTheBlockItCachedLast(t *testing.T) {
	// Two shards, two goroutines whose stacks stay put: the second takes
	// the shard the first did not.
	p := newPool(t, sim.New(0, 0), pool.Shards(2))
	var a, b, c, d pool.Block
	release := onStackOfItsOwn(func() {
		a, _ = p.Alloc(1000)
		b, _ = p.Alloc(1000)
		_ = p.Free(a)
		_ = p.Free(b)
		c, _ = p.Alloc(1000)
	})
	defer release()
	require.Equal(t, b.Ptr(), c.Ptr(), "the block freed last is a hit")
	cs := p.ShardOf(c)
	onStackOfItsOwn(func() { d, _ = p.Alloc(1000) })()
	require.NotEqual(t, cs, p.ShardOf(d), "another goroutine, another shard")
	assert.Equal(t, int64(1), p.Stats().CacheHits,
		"a, freed before b, is no hit from another shard either: which shard a goroutine uses does not change where blocks land")
	require.NoError(t, p.Free(c))
	require.NoError(t, p.Free(d))
}

// onStackOfItsOwn runs fn on a goroutine of its own whose stack has grown
// first, so that it does not move while fn runs (a goroutine's shard is
// found from where its stack lies), and waits for fn. The goroutine, and
// its stack, stay until the function returned is called, so that no later
// goroutine gets that stack, and its shard.
func onStackOfItsOwn(fn func()) (release func()) {
	done, exit, gone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(gone)
		growStack(64)
		fn()
		close(done)
		<-exit
	}()
	<-done
	return func() {
		close(exit)
		<-gone
	}
}

// growStack uses n KiB of stack, and leaves the stack that large.
func growStack(n int) byte {
	var pad [1024]byte
	if n <= 1 {
		return pad[0]
	}
	return growStack(n-1) + pad[n%1024]
}

func TestTheFrontCacheKeepsNoLargeBinsForOtherKeysAfterADrain(t *testing.T) {
	// Every step frees a block of a few sizes, then many of one size: after
	// the drain at the next step's first allocation, the bins that held
	// them are kept for reuse, each for whichever size comes. A bin that
	// held the many, reused for a size of one block, must not keep room
	// for the many, or in time every bin is that large.
	const sizes, few, many = 61, 8, 1000
	p := newPool(t, sim.New(0, 0), pool.Shards(1))
	var bs []pool.Block
	for step := range 2 * sizes {
		for i := range few + 1 {
			n := 1
			if i == few {
				n = many
			}
			size := int64((step+7*i)%sizes+1) * 512
			for range n {
				b, err := p.Alloc(size)
				require.NoError(t, err)
				bs = append(bs, b)
			}
		}
		for _, b := range bs {
			require.NoError(t, p.Free(b))
		}
		bs = bs[:0]
	}
	assert.Less(t, p.BinCapacity(), 4*many, "the bins' room, in blocks: about one step's, not the many for every bin")
	require.NoError(t, p.CheckInvariants(nil))
}

func TestClosedPool(t *testing.T) {
	src := sim.New(0, 0)
	p, err := pool.New(src)
	require.NoError(t, err)
	b, err := p.Alloc(64)
	require.NoError(t, err)
	err = p.Close()
	require.Error(t, err, "closing with a live block is reported")
	assert.Contains(t, err.Error(), "1 block")
	_, err = p.Alloc(64)
	assert.ErrorIs(t, err, pool.ErrClosed)
	require.NoError(t, p.Free(b), "a block freed after Close is released")
	assert.Zero(t, p.Stats().Reserved)
	assert.NoError(t, p.Close(), "Close is idempotent")
}

// A block used on another stream and freed after Close is released as
// any other freed after Close: its free leaves it pending for the stream's
// event, and after Close nothing else looks at the pending blocks.
func TestABlockUsedOnAnotherStreamAndFreedAfterCloseIsReleased(t *testing.T) {
	for _, plain := range []bool{false, true} {
		src := sim.New(0, 0)
		var s pool.Source = src
		if plain {
			s = src.Plain()
		}
		p, err := pool.New(s)
		require.NoError(t, err)
		b, err := p.Alloc(23128)
		require.NoError(t, err)
		require.NoError(t, p.RecordUse(b, 7))
		require.Error(t, p.Close(), "closing with a live block is reported")
		require.NoError(t, p.Free(b), "a block freed after Close is released")
		require.Zero(t, p.Stats().Reserved, "plain %v", plain)
		allocs, handles, reserves, events := src.Live()
		require.Zero(t, allocs+handles+reserves+events, "plain %v: left at the source", plain)
	}
}

func TestSourceErrorsThatAreNotOOMPassThrough(t *testing.T) {
	boom := errors.New("device lost")
	p := newPool(t, failingSource{err: boom})
	_, err := p.Alloc(64)
	assert.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, pool.ErrOutOfMemory)
}

type failingSource struct{ err error }

func (f failingSource) Alloc(int64) (uintptr, error) { return 0, f.err }

func (f failingSource) Free(uintptr, int64) error { return f.err }

func (f failingSource) MemInfo() (int64, int64, error) { return 1 << 30, 1 << 30, nil }

// stuckEvents is a source whose streams cannot be waited for while stuck.
type stuckEvents struct {
	*sim.Source
	stuck bool
}

func (s *stuckEvents) WaitEvent(ev uintptr) error {
	if s.stuck {
		return errors.New("device hung")
	}
	return s.Source.WaitEvent(ev)
}

func TestEmptyCacheKeepsMemoryItCannotProveIdle(t *testing.T) {
	src := &stuckEvents{Source: sim.New(0, 0), stuck: true}
	p := newPool(t, src)
	b, err := p.Alloc(30 << 20)
	require.NoError(t, err)
	require.NoError(t, p.Free(b))
	before := p.Stats().Reserved
	err = p.EmptyCache()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "device hung")
	assert.Equal(t, before, p.Stats().Reserved, "nothing is unmapped while the stream may still use it")
	require.NoError(t, p.CheckInvariants(nil))
	again, err := p.Alloc(30 << 20)
	require.NoError(t, err, "the memory is still there to use")
	require.NoError(t, p.Free(again))
	src.stuck = false
	require.NoError(t, p.Close(), "once the device answers, all of it goes back")
	assert.Zero(t, src.Used())
}

// memInfoFails is a source that cannot say how large it is.
type memInfoFails struct{ *sim.PlainSource }

func (memInfoFails) MemInfo() (int64, int64, error) { return 0, 0, errors.New("no memory info") }

func TestASourceWithoutMemInfoIsUsable(t *testing.T) {
	src := memInfoFails{sim.New(0, 0).Plain()}
	p := newPool(t, src)
	b, err := p.Alloc(1 << 20)
	require.NoError(t, err, "only LimitFraction needs the device's size")
	require.NoError(t, p.Free(b))
	_, err = pool.New(src, pool.MaxReservedFraction(0.5))
	assert.ErrorContains(t, err, "no memory info")
}

func TestRequestsNoDeviceHoldsAreOutOfMemory(t *testing.T) {
	for name, src := range map[string]pool.Source{
		"expandable": sim.New(64<<20, 0),
		"classic":    sim.New(64<<20, 0).Plain(),
		"unlimited":  sim.New(0, 0),
	} {
		t.Run(name, func(t *testing.T) {
			p := newPool(t, src)
			for _, n := range []int64{65 << 20, 128 << 40, pool.MaxSize} {
				if name == "unlimited" && n < 2<<40 {
					continue // the unlimited source says it holds 1 TiB
				}
				_, err := p.Alloc(n)
				require.ErrorIs(t, err, pool.ErrOutOfMemory, "%d bytes", n)
				var oom *pool.OOMError
				require.ErrorAs(t, err, &oom)
				assert.Equal(t, n, oom.Requested)
			}
			assert.Zero(t, p.Stats().Reserved)
		})
	}
}

// unaligned is a source whose allocations start 8 bytes past alignment.
type unaligned struct{ *sim.PlainSource }

func (u unaligned) Alloc(n int64) (uintptr, error) {
	p, err := u.PlainSource.Alloc(n)
	return p + 8, err
}

func (u unaligned) Free(p uintptr, n int64) error { return u.PlainSource.Free(p-8, n) }

// The observer gets each allocation's context, whatever cache or arena
// serves it, so that a recording can name who allocated; a free has none.
func TestTheObserverGetsTheAllocationsContext(t *testing.T) {
	p := newPool(t, sim.New(0, 0))
	type key struct{}
	var got []any
	p.Observe(func(ctx context.Context, alloc bool, b pool.Block) {
		got = append(got, alloc, ctx.Value(key{}))
	})
	ctx := context.WithValue(context.Background(), key{}, "a")
	for _, size := range []int64{512, 512, 64 << 20} { // new, cached, large
		b, err := p.AllocContext(ctx, size, 0)
		require.NoError(t, err)
		require.NoError(t, p.Free(b))
	}
	p.Observe(nil)
	assert.Equal(t, []any{true, "a", false, nil, true, "a", false, nil, true, "a", false, nil}, got)
}
