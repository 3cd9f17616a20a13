package foreign

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// faultyDevice makes device 0 a device whose streams a test can hold busy,
// with a stream of a library's, closed when the test ends.
func faultyDevice(t *testing.T) (st *gpu.Stream, f *gputest.Faults) {
	t.Helper()
	g, f, err := gputest.OpenFaulty(64 << 20)
	require.NoError(t, err)
	devices.mu.Lock()
	d, err := adopt(0, g)
	devices.mu.Unlock()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, Shutdown()) }) // which closes g
	st, err = d.root.scope.NewStream()
	require.NoError(t, err)
	return st, f
}

// A block that record_stream named a stream for is not reused before the
// work queued there at its free is done.
func TestRecordStreamKeepsABlockUntilTheStreamPasses(t *testing.T) {
	st, f := faultyDevice(t)
	ptr, err := Alloc(0, 0, 4096, 0)
	require.NoError(t, err)
	require.NoError(t, RecordStream(ptr, st.ID()))
	require.NoError(t, RecordStream(ptr, 0), "its own stream")
	release, err := f.Hold(st)
	require.NoError(t, err)
	require.NoError(t, Free(0, ptr, -1, 0))
	again, err := Alloc(0, 0, 4096, 0)
	require.NoError(t, err)
	assert.NotEqual(t, ptr, again, "reused while the recorded stream may still use it")
	release()
	require.NoError(t, st.Synchronize())
	require.NoError(t, Free(0, again, -1, 0))
	require.ErrorContains(t, RecordStream(ptr, st.ID()), "is no live allocation of this library")
}

// A scope begun from C allocates for a library's stream in a child on it:
// the pool reuses the stream's blocks at once on it, and the scope's end
// passes what is live up with the rest.
func TestAStreamsAllocationsGoToAChildOnIt(t *testing.T) {
	d := hostDevice(t)
	st, err := d.root.scope.NewStream() // a library's stream, as far as the scope is concerned
	require.NoError(t, err)
	id, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	p, err := Alloc(0, id, 4096, st.ID())
	require.NoError(t, err)
	q, err := Alloc(0, id, 4096, 0)
	require.NoError(t, err)
	assert.NotEqual(t, p, q)

	onStream := RootName + "/torch/stream " + fmt.Sprintf("%#x", st.ID())
	buffers := func() map[string]int {
		snap, err := d.gpu.Snapshot()
		require.NoError(t, err)
		out := map[string]int{}
		for _, s := range snap.Scopes {
			out[s.Path] = len(s.Buffers)
		}
		return out
	}
	assert.Equal(t, map[string]int{RootName: 0, RootName + "/torch": 1, onStream: 1}, buffers())

	require.NoError(t, Free(0, p, 4096, st.ID()))
	again, err := Alloc(0, id, 4096, st.ID())
	require.NoError(t, err)
	assert.Equal(t, p, again, "reused at once on its own stream")

	require.NoError(t, End(id, false))
	assert.Equal(t, map[string]int{RootName: 2}, buffers(), "both passed to the root, the stream's child ended")
	require.NoError(t, Free(0, again, 4096, st.ID()))
	require.NoError(t, Free(0, q, 4096, 0))
}

// A library's stream that record_stream named, on the host device, serves
// the library's later allocations on it: the host driver makes a stream for
// a handle it does not know, as CUDA's adopts a library's CUstream, where
// before the pool found no such stream at the free and retired it.
func TestAStreamRecordStreamNamedServesLaterAllocations(t *testing.T) {
	hostDevice(t)
	const side = 0x5000 // a library's stream handle, no stream of the driver's
	p, err := Alloc(0, 0, 4096, 0)
	require.NoError(t, err)
	require.NoError(t, RecordStream(p, side))
	require.NoError(t, Free(0, p, 4096, 0))
	id, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	q, err := Alloc(0, id, 4096, side)
	require.NoError(t, err, "the stream is still in use")
	require.NoError(t, Free(0, q, 4096, side))
	require.NoError(t, End(id, false))
}

// pendingBlocks counts the blocks of device d's pool that wait for other
// streams' work before they are reused.
func pendingBlocks(t *testing.T, d *gpu.Device) int {
	t.Helper()
	snap, err := d.Snapshot()
	require.NoError(t, err)
	n := 0
	for _, seg := range snap.Pool.Segments {
		for _, b := range seg.Blocks {
			if b.State == "pending" {
				n++
			}
		}
	}
	return n
}

// Issue 43, point 2: a block allocated for a side stream lives on it, and
// record_stream onto the default stream (FSDP's pattern) must hold it until
// the default stream's work queued before the free has completed; it was
// dropped, read as the allocation's own stream.
func TestRecordStreamOntoTheDefaultStreamHoldsABlockOfASideStream(t *testing.T) {
	d := hostDevice(t)
	const side = 0x5000 // a library's stream handle
	p, err := Alloc(0, 0, 4096, side)
	require.NoError(t, err)
	require.NoError(t, RecordStream(p, 0))
	require.NoError(t, Free(0, p, 4096, side))
	assert.Equal(t, 1, pendingBlocks(t, d.gpu), "freed without waiting for the default stream")
}

// Issue 43, point 2: a free that names another stream than the
// allocation's records a use there first: the block is not reused before
// that stream's work queued before the free has completed. It was freed
// as if on its own stream, and the next allocation got it at once.
func TestAFreeNamingAnotherStreamWaitsForIt(t *testing.T) {
	// Allocated for a side stream, freed naming the default one.
	d := hostDevice(t)
	p, err := Alloc(0, 0, 4096, 0x5000)
	require.NoError(t, err)
	require.NoError(t, Free(0, p, 4096, 0))
	assert.Equal(t, 1, pendingBlocks(t, d.gpu), "freed without waiting for the stream named")
}

// Issue 43, point 4: before an allocation fails for want of memory, what
// the caches hold is given back and the allocation tried again, as c10's
// allocator releases its cached blocks: here the pool's memory cached for
// a side stream, which the default stream cannot use until it goes back.
func TestAnAllocationPastTheCapFirstTakesBackWhatTheCachesHold(t *testing.T) {
	d := hostDevice(t) // 64 MiB
	require.NoError(t, SetMaxReserved(0, 16<<20))
	const side = 0x5000
	p, err := Alloc(0, 0, 12<<20, side)
	require.NoError(t, err)
	require.NoError(t, Free(0, p, 12<<20, side))
	require.Positive(t, d.gpu.Stats().Cached, "the side stream's 12 MiB stay cached")
	q, err := Alloc(0, 0, 12<<20, 0)
	require.NoError(t, err, "the side stream's cache kept the default stream's 12 MiB from fitting under 16 MiB")
	require.NoError(t, Free(0, q, 12<<20, 0))
	require.NoError(t, SetMaxReserved(0, 0))
}
