package cthreads_test

import (
	"encoding/json"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/cthreads"
)

// onOneThread keeps the test on its OS thread: the entry points keep each
// thread's scopes.
func onOneThread(t *testing.T) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

// A scope begun inside a sleepable one lives in its memory: while that
// sleeps, an allocation in it fails, as in the sleepable scope itself,
// and a free of one of its buffers is bookkeeping in Go, which the pair
// cache keeps no part of. The pair cache kept such a free and served the
// next allocation of its size from memory given back to the driver.
func TestThePairCacheKeepsNothingOfAScopeInsideASleepableOne(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	onOneThread(t)
	s := cthreads.BeginSleepable("weights")
	require.Positive(t, s)
	inner := cthreads.BeginScope("inner")
	require.Positive(t, inner)
	const size = 1 << 20
	p := cthreads.TorchAlloc(size, 0)
	require.NotZero(t, p)
	q := cthreads.TorchAlloc(size, 0)
	require.NotZero(t, q)
	require.True(t, cthreads.Sleep(s))

	var st struct {
		Sleeping int64 `json:"sleeping"`
		Buffers  int64 `json:"sleeping_buffers"`
	}
	n, _ := cthreads.Failures()
	cthreads.TorchFree(p, size, 0)
	cthreads.TorchFree(q, size, 0x6000) // naming another stream, as after a record_stream
	after, last := cthreads.Failures()
	assert.Equal(t, n, after, "a free while asleep failed: %s", last)
	require.NoError(t, json.Unmarshal(cthreads.Stats(0), &st))
	assert.Zero(t, st.Sleeping, "the frees asleep are in the figures")
	assert.Zero(t, st.Buffers)
	assert.Zero(t, cthreads.TorchAlloc(size, 0), "an allocation in a scope asleep was served")
	done, _ := cthreads.Failures()
	assert.Equal(t, after+1, done, "the allocation asleep failed")
	cthreads.TorchFree(p, size, 0)
	again, last := cthreads.Failures()
	assert.Equal(t, done+1, again, "a second free of a block freed asleep")
	assert.Contains(t, last, "no live allocation")

	require.True(t, cthreads.Wake(s))
	require.True(t, cthreads.EndScopeKeeping(inner))
	require.True(t, cthreads.EndScopeKeeping(s), "it holds nothing: it ends")
	assert.False(t, cthreads.Wake(s), "it ended")
}

// Frees from C threads race a sleep and a wake of their scope, from
// another thread: each frees its buffer once, none fails, and what sleeps
// at the end is what was not freed.
func TestFreesFromCThreadsRacingSleepAndWake(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	onOneThread(t)
	s := cthreads.BeginSleepable("racing")
	require.Positive(t, s)
	const size, kept = 64 << 10, 3 << 20
	k := cthreads.TorchAlloc(kept, 0)
	require.NotZero(t, k)
	ptrs := make([]uintptr, 256)
	for i := range ptrs {
		ptrs[i] = cthreads.TorchAlloc(size, 0)
		require.NotZero(t, ptrs[i])
	}
	n, _ := cthreads.Failures()
	assert.Zero(t, cthreads.FreesRacingSleep(s, ptrs, size, 4, 20), "a sleep or a wake failed")
	after, last := cthreads.Failures()
	assert.Equal(t, n, after, "a free racing a sleep or a wake failed: %s", last)
	require.True(t, cthreads.Sleep(s))
	var st struct {
		Sleeping int64 `json:"sleeping"`
	}
	require.NoError(t, json.Unmarshal(cthreads.Stats(0), &st))
	assert.Equal(t, int64(kept), st.Sleeping, "what sleeps is what was not freed")
	require.True(t, cthreads.Wake(s))
	cthreads.TorchFree(k, kept, 0)
	require.True(t, cthreads.EndScopeKeeping(s))
}

// A block the pair cache evicted waits, with up to 31 others, for the next
// crossing into Go, which frees it: until then the library has freed it
// all the same, and a second free or a record_stream of it fails as one of
// a block in the cache does, and frees nothing. They freed it by its
// address, as a live allocation, and its hand-back came late.
func TestABlockThePairCacheEvictedIsFreedAlready(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	var st struct {
		Active int64 `json:"active_blocks"`
		Late   int64 `json:"c_pair_late"`
	}
	require.NoError(t, json.Unmarshal(cthreads.Stats(0), &st)) // the cache gives back what it holds
	late := st.Late
	const size = 4096
	var p [33]uintptr
	for k := range p {
		p[k] = cthreads.TorchAlloc(size, 0)
		require.NotZero(t, p[k])
	}
	for _, q := range p {
		cthreads.TorchFree(q, size, 0) // the last evicts the first
	}
	n, _ := cthreads.Failures()
	cthreads.RecordStream(p[0], 0x6000)
	after, last := cthreads.Failures()
	assert.Equal(t, n+1, after, "a record_stream of the evicted block is refused")
	assert.Contains(t, last, "was freed already")
	cthreads.TorchFree(p[0], size, 0)
	after2, last := cthreads.Failures()
	assert.Equal(t, after+1, after2, "a second free of it is refused")
	assert.Contains(t, last, "was freed already")

	require.NoError(t, json.Unmarshal(cthreads.Stats(0), &st))
	assert.Zero(t, st.Active, "blocks live")
	assert.Equal(t, late, st.Late, "a hand-back came after the block was freed")
}

// The pair cache's table tracks an allocation of a scope open (tracked or
// not, and the root's), and says PC_ENDED (3) of one whose scope ended
// after Go allocated it: the entry point then asks Go whether the end
// freed it before it hands it out (foreign's
// TestAnAllocationItsScopesEndCrossedIsSettled).
func TestThePairCacheSaysWhichAllocationsScopeEnded(t *testing.T) {
	assert.Equal(t, 3, cthreads.TrackAfterEnd(63), "tracked, untracked, root, ended")
}

// Threads allocate and free in a scope, through the stream bound to it,
// while another thread ends it and binds the stream to the next: with
// flags 0 each allocation is the scope's or the enclosing one's, and each
// free finds it (none fails); with GPUSCOPE_FREE_LIVE an allocation the
// end crossed is made again, and the frees of those it freed fail, as
// frees of freed blocks do. Nothing is left live either way.
func TestScopesEndUnderAllocationsFromCThreads(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	for _, flags := range []int{0, 1} {
		n, _ := cthreads.Failures()
		allocs := cthreads.EndsUnderAllocations(4, 300, flags)
		require.Positive(t, allocs, "flags %d", flags)
		after, last := cthreads.Failures()
		if flags == 0 {
			assert.Equal(t, n, after, "a free failed: %s", last)
		}
		var st struct {
			Active int64 `json:"active_blocks"`
		}
		require.NoError(t, json.Unmarshal(cthreads.Stats(0), &st))
		assert.Zero(t, st.Active, "flags %d: blocks live", flags)
	}
}

// A record_stream that names the allocation's own stream does nothing
// (foreign's RecordStream), and leaves the block to the pair cache: it
// kept the block from the cache for good, as one recorded on another
// stream is.
func TestARecordOnTheOwnStreamLeavesTheBlockToThePairCache(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	var st struct {
		Hits int64 `json:"c_pair_hits"`
	}
	for _, stream := range []uintptr{0, 0x5000} {
		require.NoError(t, json.Unmarshal(cthreads.Stats(0), &st))
		hits := st.Hits
		p := cthreads.TorchAlloc(12345, stream)
		require.NotZero(t, p)
		cthreads.RecordStream(p, stream)
		cthreads.TorchFree(p, 12345, stream)
		q := cthreads.TorchAlloc(12345, stream)
		assert.Equal(t, p, q, "stream %#x: the block freed was not served again", stream)
		cthreads.TorchFree(q, 12345, stream)
		require.NoError(t, json.Unmarshal(cthreads.Stats(0), &st))
		assert.Equal(t, hits+1, st.Hits, "stream %#x: the pair cache did not serve it", stream)
	}
}

// A free whose size is negative (a size_t past SSIZE_MAX, as a caller of
// the size_t form passes it) is no allocation's size: it frees nothing.
// The pair cache and Go read a negative size as "none given", CuPy's, and
// freed the block whatever its size.
func TestAFreeOfANegativeSizeFreesNothing(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	p := cthreads.TorchAlloc(4096, 0)
	require.NotZero(t, p)
	n, _ := cthreads.Failures()
	cthreads.TorchFree(p, -4096, 0)
	after, last := cthreads.Failures()
	assert.Equal(t, n+1, after, "the free was not refused")
	assert.Contains(t, last, "freed with -4096 bytes: not freed")
	cthreads.TorchFree(p, 4096, 0)
	done, _ := cthreads.Failures()
	assert.Equal(t, after, done, "the block was freed by the free that named a negative size")
	var st struct {
		Active int64 `json:"active_blocks"`
	}
	require.NoError(t, json.Unmarshal(cthreads.Stats(0), &st))
	assert.Zero(t, st.Active)
}
