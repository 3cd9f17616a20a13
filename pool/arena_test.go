package pool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func TestSizesRoundToHalfKiB(t *testing.T) {
	assert.Equal(t, int64(512), pool.Rounded(1))
	assert.Equal(t, int64(1024), pool.Rounded(513))
	assert.Equal(t, int64(1<<20), pool.Rounded(1<<20))
}

func TestEveryBlockIsAligned(t *testing.T) {
	for name, src := range map[string]pool.Source{"expandable": sim.New(0, 0), "classic": sim.New(0, 0).Plain()} {
		t.Run(name, func(t *testing.T) {
			p := newPool(t, src)
			var live []pool.Block
			for _, n := range []int64{1, 100, 255, 256, 257, 511, 513, 4097, 1<<20 - 1, 1<<20 + 1, 3<<20 + 5} {
				for range 3 {
					b, err := p.Alloc(n)
					require.NoError(t, err)
					assert.Zero(t, b.Ptr()%pool.Alignment, "%d bytes at %#x", n, b.Ptr())
					live = append(live, b)
				}
			}
			for _, b := range live {
				require.NoError(t, p.Free(b))
			}
		})
	}
	t.Run("a source that returns unaligned memory is refused", func(t *testing.T) {
		src := sim.New(0, 0)
		p := newPool(t, unaligned{src.Plain()})
		_, err := p.Alloc(4096)
		assert.ErrorContains(t, err, "not aligned")
		allocs, _, _, _ := src.Live()
		assert.Zero(t, allocs, "the unaligned allocation went back")
	})
}
