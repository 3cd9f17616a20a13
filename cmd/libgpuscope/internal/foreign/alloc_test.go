package foreign

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// Size 0 is no allocation and no failure, as c10's allocator gives it:
// address 0, no error, nothing allocated, in every form; a negative size
// is still refused.
func TestSizeZeroIsNullQuietly(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "16777216")
	defer func() { require.NoError(t, Shutdown()) }()
	d, err := deviceAt(0)
	require.NoError(t, err)
	before := d.gpu.Stats()

	ptr, err := Alloc(0, 0, 0, 0)
	require.NoError(t, err)
	require.Zero(t, ptr)
	ptr, err = Alloc(0, 0, 0, 0x1234)
	require.NoError(t, err, "size 0 for a stream")
	require.Zero(t, ptr)
	id, err := Begin(0, 0, "zero")
	require.NoError(t, err)
	ptr, err = AllocIn(id, 0, 0, 0)
	require.NoError(t, err, "size 0 in a scope")
	require.Zero(t, ptr)
	require.Equal(t, before.Allocated, d.gpu.Stats().Allocated)
	require.Equal(t, before.ActiveBlocks, d.gpu.Stats().ActiveBlocks)

	_, err = Alloc(0, 0, -1, 0)
	require.ErrorIs(t, err, gpu.ErrInvalidSize)
	_, err = AllocIn(id, 0, -1, 0)
	require.ErrorIs(t, err, gpu.ErrInvalidSize)
	require.NoError(t, End(id, false))
}
