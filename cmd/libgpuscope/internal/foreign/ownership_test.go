package foreign

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// Issue 43, point 1: a block the pair cache hands back is freed only while
// it is the allocation the cache held. Each test replays one window: the
// cache's blocks leave it for Go to free, a scope's end with
// GPUSCOPE_FREE_LIVE frees them first, their address goes to another
// allocation, and the hand-back arrives late. Freeing by address alone, the
// late hand-back freed the new owner's live block.

// reused ends the scope id, freeing what it holds, and allocates size bytes
// again, which get the address of was, the block the cache handed back.
func reused(t *testing.T, id int64, was Block, size int64) Block {
	t.Helper()
	require.NoError(t, End(id, true))
	now := allocated(t, 0, size)
	require.Equal(t, was.Ptr, now.Ptr, "the address went to another allocation")
	require.NotEqual(t, was.ID, now.ID)
	return now
}

// stillLive checks that a, the new owner, is live, and frees it; late was
// the count of late hand-backs before the window.
func stillLive(t *testing.T, a Block, size, late int64) {
	t.Helper()
	assert.EqualValues(t, 1, lateReleases.Load()-late, "the late hand-back was counted")
	require.NoError(t, FreeID(0, a.Ptr, a.ID, size, 0), "the new owner's block was freed under it")
	assert.Zero(t, activeBlocks(t))
}

// cachedInScope begins a scope and has the cache hold a block of size
// bytes of it. It returns the count of late hand-backs before.
func cachedInScope(t *testing.T, f *fakePairs, size int64) (int64, Block, int64) {
	t.Helper()
	late := lateReleases.Load()
	id, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	a := allocated(t, id, size)
	f.free(t, a, id)
	return id, a, late
}

// A miss of the cache's takes its evicted blocks into the crossing, which
// frees them before it allocates.
func TestALateReleaseOfAMissFreesNoNewOwner(t *testing.T) {
	f := withFakePairs(t)
	hostDevice(t)
	id, a, late := cachedInScope(t, f, 4096)
	var out [PairCacheOut]Block
	n := f.Take(0, &out) // the miss in C
	b := reused(t, id, a, 4096)
	c, err := AllocAfter(out[:n], 0, 0, 0, 8192, 0) // its crossing into Go
	require.NoError(t, err)
	require.NoError(t, Free(0, c.Ptr, 8192, 0))
	stillLive(t, b, 4096, late)
}

// gpuscope_stats, whose figures are read once the cache gave back what it
// holds.
func TestALateReleaseOfStatsFreesNoNewOwner(t *testing.T) {
	whileReading(t, func() { Stats(0, 0) })
}

// gpuscope_summary, likewise.
func TestALateReleaseOfSummaryFreesNoNewOwner(t *testing.T) {
	whileReading(t, func() { Summary(0) })
}

// whileReading replays the window in read, a call that has the cache give
// back what it holds.
func whileReading(t *testing.T, read func()) {
	f := withFakePairs(t)
	hostDevice(t)
	id, a, late := cachedInScope(t, f, 4096)
	paused, resume := f.pauseTake()
	done := make(chan struct{})
	go func() { read(); close(done) }()
	<-paused
	b := reused(t, id, a, 4096)
	resume()
	<-done
	stillLive(t, b, 4096, late)
}

// An allocation that finds the pool short, which has the cache give back
// what it holds and tries again (here one of Go's, gpu's allocOnce).
func TestALateReleaseOfAnOutOfMemoryRetryFreesNoNewOwner(t *testing.T) {
	f := withFakePairs(t)
	d := hostDevice(t)
	require.NoError(t, SetMaxReserved(0, 8<<20))
	id, a, late := cachedInScope(t, f, 4<<20)
	paused, resume := f.pauseTake()
	done := make(chan error)
	go func() {
		done <- gpu.WithScope(t.Context(), d.gpu, func(s *gpu.Scope) error {
			_, err := s.Alloc(6 << 20) // short while the cache holds 4 MiB of the 8
			return err
		})
	}()
	<-paused
	b := reused(t, id, a, 4<<20)
	resume()
	require.Error(t, <-done, "the new owner's 4 MiB leave no room for 6")
	stillLive(t, b, 4<<20, late)
}

// Issue 43, point 1, the window its author left: an allocation that Go
// made in a scope whose end comes before the pair cache's table tracks it,
// on the C side. The end may free it (GPUSCOPE_FREE_LIVE), so the C side
// asks Settle before it hands the block out: where the end freed it, or
// has yet to settle it, the C side allocates again in the enclosing scope;
// where the end passed it on, Settle names the scope that holds it. Handed
// out freed, the library's later free went by address, and freed the
// block's next owner.
func TestAnAllocationItsScopesEndCrossedIsSettled(t *testing.T) {
	f := withFakePairs(t)
	hostDevice(t)
	t.Run("freed by the end, it is not handed out", func(t *testing.T) {
		id, err := Begin(0, 0, "request")
		require.NoError(t, err)
		a := allocated(t, id, 4096)
		require.NoError(t, End(id, true))
		assert.EqualValues(t, -1, Settle(a.Ptr, a.ID))
		assert.Zero(t, activeBlocks(t))
	})
	t.Run("passed on by the end, it is the enclosing scope's", func(t *testing.T) {
		outer, err := Begin(0, 0, "server")
		require.NoError(t, err)
		id, err := Begin(0, outer, "request")
		require.NoError(t, err)
		a := allocated(t, id, 4096)
		require.NoError(t, End(id, false))
		assert.Equal(t, outer, Settle(a.Ptr, a.ID))
		require.NoError(t, FreeID(0, a.Ptr, a.ID, 4096, 0))
		require.NoError(t, End(outer, false))
		assert.Zero(t, activeBlocks(t))
	})
	t.Run("met while the end is under way, it is freed once", func(t *testing.T) {
		id, err := Begin(0, 0, "request")
		require.NoError(t, err)
		a := allocated(t, id, 4096)
		settled := int64(0)
		f.mu.Lock()
		f.ending = func() { settled = Settle(a.Ptr, a.ID) }
		f.mu.Unlock()
		require.NoError(t, End(id, true), "the end freed nothing twice")
		assert.EqualValues(t, -1, settled)
		assert.Contains(t, string(Stats(0, 0)), "ended with no buffer live", "the end found it settled")
		assert.Zero(t, activeBlocks(t))
	})
}
