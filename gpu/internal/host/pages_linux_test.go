//go:build linux

package host_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/internal/host"
	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/pool"
)

func TestHandlesMoveWithTheirBytes(t *testing.T) {
	d, err := host.New(8 * host.PageSize)
	require.NoError(t, err)
	const P = host.PageSize
	va, err := d.ReserveAddress(8 * P)
	require.NoError(t, err)
	h1, err := d.Create(P)
	require.NoError(t, err)
	h2, err := d.Create(2 * P)
	require.NoError(t, err)

	assert.Error(t, d.CopyHtoD(va, []byte{1}, 0), "reserved but unmapped memory is not accessible")
	assert.Error(t, d.Map(va, P, h2), "a handle is mapped whole")
	require.NoError(t, d.Map(va+P, P, h1))
	require.NoError(t, d.Map(va+2*P, 2*P, h2))
	assert.Error(t, d.Map(va+2*P, P, h1), "mapping over a mapping")
	assert.Error(t, d.CopyHtoD(va+P, []byte{1}, 0), "mapped memory is not accessible before SetAccess")
	require.NoError(t, d.SetAccess(va+P, 3*P), "one access call covers several mappings")
	data := bytes.Repeat([]byte{1, 2, 3, 4}, int(3*P/4))
	require.NoError(t, d.CopyHtoD(va+P, data, 0))

	assert.Error(t, d.Unmap(va+2*P, P), "a mapping is unmapped whole")
	require.NoError(t, d.Map(va+5*P, 2*P, h2), "a handle may be mapped at a second address")
	require.NoError(t, d.SetAccess(va+5*P, 2*P))
	got := make([]byte, 2*P)
	require.NoError(t, d.CopyDtoH(got, va+5*P, 0))
	assert.Equal(t, data[P:], got, "both addresses show the same bytes")
	require.NoError(t, d.Unmap(va+2*P, 2*P))
	require.NoError(t, d.CopyDtoH(got, va+5*P, 0))
	assert.Equal(t, data[P:], got, "unmapping one address of a handle keeps its bytes")
	assert.Error(t, d.CopyDtoH(make([]byte, 1), va+2*P, 0), "an unmapped range is gone from its old place")

	assert.Error(t, d.Release(h2), "a mapped handle cannot be released")
	assert.Error(t, d.ReleaseAddress(va, 8*P), "nor a reservation with memory mapped")
	require.NoError(t, d.Unmap(va+5*P, 2*P))
	require.NoError(t, d.Map(va+6*P, 2*P, h2))
	require.NoError(t, d.SetAccess(va+6*P, 2*P))
	require.NoError(t, d.CopyDtoH(got, va+6*P, 0))
	assert.Equal(t, bytes.Repeat([]byte{host.PoisonByte}, int(2*P)), got, "memory unmapped from its last address is poisoned where it moves")
	require.NoError(t, d.Unmap(va+6*P, 2*P))
	require.NoError(t, d.Unmap(va+P, P))
	require.NoError(t, d.Map(va+P, P, h1))
	require.NoError(t, d.SetAccess(va+P, P))
	require.NoError(t, d.CopyDtoH(got[:P], va+P, 0))
	assert.Equal(t, data[:P], got[:P], "mapped again where it was, a handle keeps its bytes, as on a GPU (a Sleep undone)")
	require.NoError(t, d.Unmap(va+P, P))
	require.NoError(t, d.Release(h1))
	assert.Error(t, d.Release(h1), "double release")
	require.NoError(t, d.Release(h2))
	require.NoError(t, d.ReleaseAddress(va, 8*P))
	assert.Zero(t, d.Used())
	require.NoError(t, d.Close())
}

func TestHandlesCountAgainstCapacity(t *testing.T) {
	d, err := host.New(3 * host.PageSize)
	require.NoError(t, err)
	a, err := d.Create(2 * host.PageSize)
	require.NoError(t, err)
	b, err := d.Create(host.PageSize)
	require.NoError(t, err)
	_, err = d.Create(host.PageSize)
	assert.True(t, errdefs.IsSourceOutOfMemory(err))
	_, err = d.Create(host.PageSize + 1)
	assert.Error(t, err, "a size that is not whole granules")
	require.NoError(t, d.Release(a))
	c, err := d.Create(2 * host.PageSize)
	require.NoError(t, err, "a released handle makes room")
	require.NoError(t, d.Release(b))
	require.Error(t, d.Close(), "a handle left is reported")
	_ = c
}

func TestCloseUnmapsWhatWasLeft(t *testing.T) {
	d, err := host.New(4 * host.PageSize)
	require.NoError(t, err)
	va, err := d.ReserveAddress(4 * host.PageSize)
	require.NoError(t, err)
	h, err := d.Create(host.PageSize)
	require.NoError(t, err)
	require.NoError(t, d.Map(va, host.PageSize, h))
	require.NoError(t, d.SetAccess(va, host.PageSize))
	assert.Error(t, d.Close(), "a leak is reported")
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	assert.NotContains(t, string(maps), fmt.Sprintf("%x-", va), "the reservation is gone from the process")
}

// TestPoolOnRealPagesKeepsEveryBlocksBytes runs the pool over the host
// device's real pages and checks the bytes themselves: every live block
// holds a pattern of its own at both ends, so two blocks that overlapped,
// or a page moved from under a live block, would show.
func TestPoolOnRealPagesKeepsEveryBlocksBytes(t *testing.T) {
	d, err := host.New(96 << 20)
	require.NoError(t, err)
	// The limit makes the pool move memory out from under free blocks.
	p, err := pool.New(d, pool.MaxReserved(48<<20), pool.GrowthStep(0))
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
	assert.Positive(t, p.Stats().PagesMoved, "memory moved while blocks lived around it")
	for _, lb := range live {
		require.NoError(t, p.Free(lb.b))
	}
	require.NoError(t, p.Close())
	require.NoError(t, d.Close(), "the pool returned every page and reservation")
}
