//go:build cuda

package cuda_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// fill returns n bytes that differ from one position to the next.
func fill(seed byte, n int64) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(i*131) ^ seed
	}
	return out
}

// TestASleepingScopeGivesTheGPUItsMemoryBack is issue 46 on the CUDA
// driver's page calls: Sleep releases the scope's pages (cuMemUnmap,
// cuMemRelease), so that the driver's free memory rises by what the scope
// held, while the addresses stay reserved; Wake creates and maps new pages
// at the same addresses (cuMemCreate, cuMemMap, cuMemSetAccess) and copies
// back what Sleep kept, through page-locked memory.
func TestASleepingScopeGivesTheGPUItsMemoryBack(t *testing.T) {
	ctx := context.Background()
	dev, err := gpu.Open(0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, dev.Close()) }()
	s, err := dev.NewScope(gpu.Name("weights"), gpu.Sleepable())
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	const n = 256 << 20
	b, err := s.Alloc(n)
	require.NoError(t, err)
	small, err := s.Alloc(1000) // a block of the small arena, in pages of its own
	require.NoError(t, err)
	want := fill(7, n)
	require.NoError(t, b.CopyFromHost(want))
	require.NoError(t, small.CopyFromHost(want[:1000]))
	require.NoError(t, dev.EmptyCache())
	at, reserved := b.Ptr(), dev.Stats().Reserved

	for _, contents := range []gpu.Contents{gpu.KeepContents, gpu.DiscardContents} {
		before, _, err := dev.MemInfo()
		require.NoError(t, err)
		require.NoError(t, s.Sleep(ctx, contents))
		after, _, err := dev.MemInfo()
		require.NoError(t, err)
		st := dev.Stats()
		assert.Equal(t, reserved, st.SleepingReleased, "every page of the scope went back")
		assert.GreaterOrEqual(t, after-before, reserved*99/100, "the driver's free memory rose by what the scope held")
		assert.ErrorIs(t, b.CopyToHost(make([]byte, 1)), gpu.ErrAsleep)
		assert.Zero(t, b.Ptr())

		// Another scope takes the memory meanwhile, and gives it back.
		other, err := dev.NewScope()
		require.NoError(t, err)
		x, err := other.Alloc(n)
		require.NoError(t, err)
		require.NoError(t, x.Memset(0xEE))
		require.NoError(t, other.Close())
		require.NoError(t, dev.EmptyCache())

		require.NoError(t, s.Wake(ctx))
		assert.Equal(t, at, b.Ptr(), "the same address")
		got := make([]byte, n)
		require.NoError(t, b.CopyToHost(got))
		if contents == gpu.KeepContents {
			assert.True(t, string(got) == string(want), "the same bytes")
			gotSmall := make([]byte, 1000)
			require.NoError(t, small.CopyToHost(gotSmall))
			assert.Equal(t, want[:1000], gotSmall)
		} else {
			assert.True(t, string(got) == string(make([]byte, n)), "zeros where the contents were dropped")
		}
		require.NoError(t, b.CopyFromHost(want))
	}
	st := dev.Stats()
	assert.Equal(t, int64(2), st.Sleeps)
	assert.Equal(t, int64(2), st.Wakes)
}
