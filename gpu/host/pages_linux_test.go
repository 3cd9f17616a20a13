//go:build linux

package host_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/host"
	"github.com/gpuscope/gpuscope/pool"
)

func TestPagesMoveWithTheirBytes(t *testing.T) {
	d, err := host.New(8 * host.PageSize)
	require.NoError(t, err)
	const P = host.PageSize
	va, err := d.ReserveAddress(8 * P)
	require.NoError(t, err)
	p1, err := d.CreatePage()
	require.NoError(t, err)
	p2, err := d.CreatePage()
	require.NoError(t, err)

	assert.Error(t, d.CopyHtoD(va, []byte{1}, 0), "reserved but unmapped memory is not accessible")
	require.NoError(t, d.MapPages(va+P, []uint64{p1, p2}))
	assert.Error(t, d.MapPages(va+P, []uint64{p1}), "mapping over a mapped page")
	data := bytes.Repeat([]byte{1, 2, 3, 4}, int(P/2))
	require.NoError(t, d.CopyHtoD(va+P, data, 0))

	require.NoError(t, d.UnmapPages(va+2*P, P))
	assert.Error(t, d.CopyDtoH(make([]byte, 1), va+2*P, 0), "an unmapped page is gone from its old place")
	require.NoError(t, d.MapPages(va+6*P, []uint64{p2}))
	got := make([]byte, P)
	require.NoError(t, d.CopyDtoH(got, va+6*P, 0))
	assert.Equal(t, bytes.Repeat([]byte{host.PoisonByte}, int(P)), got, "freed memory is poisoned before it moves")

	assert.Error(t, d.ReleasePage(p2), "a mapped page cannot be released")
	assert.Error(t, d.ReleaseAddress(va, 8*P), "nor a reservation with pages mapped")
	require.NoError(t, d.UnmapPages(va+P, P))
	require.NoError(t, d.UnmapPages(va+6*P, P))
	require.NoError(t, d.ReleasePage(p1))
	assert.Error(t, d.ReleasePage(p1), "double release")
	require.NoError(t, d.ReleasePage(p2))
	require.NoError(t, d.ReleaseAddress(va, 8*P))
	assert.Zero(t, d.Used())
	require.NoError(t, d.Close())
}

func TestPagesCountAgainstCapacity(t *testing.T) {
	d, err := host.New(2 * host.PageSize)
	require.NoError(t, err)
	a, err := d.CreatePage()
	require.NoError(t, err)
	b, err := d.CreatePage()
	require.NoError(t, err)
	_, err = d.CreatePage()
	assert.True(t, pool.IsSourceOutOfMemory(err))
	require.NoError(t, d.ReleasePage(a))
	c, err := d.CreatePage()
	require.NoError(t, err, "a released page makes room")
	require.NoError(t, d.ReleasePage(b))
	require.Error(t, d.Close(), "a page left is reported")
	_ = c
}

// TestPoolOnRealPagesKeepsEveryBlocksBytes runs the pool over the host
// device's real pages and checks the bytes themselves: every live block
// holds a pattern of its own at both ends, so two blocks that overlapped,
// or a page moved from under a live block, would show.
func TestPoolOnRealPagesKeepsEveryBlocksBytes(t *testing.T) {
	d, err := host.New(96 << 20)
	require.NoError(t, err)
	p, err := pool.New(d)
	require.NoError(t, err)
	require.True(t, p.Expandable())
	r := rand.New(rand.NewPCG(3, 4))
	type liveBlock struct {
		b   pool.Block
		tag byte
	}
	var live []liveBlock
	check := func(step int) {
		for _, lb := range live {
			for _, at := range []uintptr{lb.b.Ptr(), lb.b.Ptr() + uintptr(lb.b.Size()-1)} {
				got := make([]byte, 1)
				require.NoError(t, d.CopyDtoH(got, at, 0), "step %d", step)
				require.Equal(t, lb.tag, got[0], "step %d: block at %#x lost its bytes", step, lb.b.Ptr())
			}
		}
	}
	for step := range 1500 {
		if r.IntN(2) == 0 || len(live) == 0 {
			n := int64(1 + r.IntN(5<<20))
			b, err := p.Alloc(n)
			if err != nil {
				require.ErrorIs(t, err, pool.ErrOutOfMemory)
				continue
			}
			tag := byte(1 + step%250)
			require.NoError(t, d.CopyHtoD(b.Ptr(), []byte{tag}, 0))
			require.NoError(t, d.CopyHtoD(b.Ptr()+uintptr(n-1), []byte{tag}, 0))
			live = append(live, liveBlock{b, tag})
		} else {
			i := r.IntN(len(live))
			require.NoError(t, p.Free(live[i].b))
			live = append(live[:i], live[i+1:]...)
		}
		if step%50 == 0 {
			require.NoError(t, p.EmptyCache())
		}
		check(step)
	}
	assert.Positive(t, p.Stats().PagesMoved)
	for _, lb := range live {
		require.NoError(t, p.Free(lb.b))
	}
	require.NoError(t, p.Close())
	require.NoError(t, d.Close(), "the pool returned every page and reservation")
}
