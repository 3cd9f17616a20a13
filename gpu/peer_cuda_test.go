//go:build cuda

package gpu_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/cuda"
)

func TestCopyBetweenTwoGPUsGoesPeerToPeer(t *testing.T) {
	infos, err := gpu.Devices()
	require.NoError(t, err)
	if len(infos) < 2 {
		t.Skipf("needs two GPUs, this machine has %d: scripts/measure/gpu-validate.sh on a two-GPU machine runs it", len(infos))
	}
	a, err := gpu.Open(0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, a.Close()) }()
	b, err := gpu.Open(1)
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()
	peer, err := b.Driver().(*cuda.Driver).PeerAccess(a.Driver().(*cuda.Driver))
	require.NoError(t, err)
	assert.True(t, peer, "two H200s of one host reach each other's memory")
	const n = 64 << 20
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	require.NoError(t, gpu.WithScope(context.Background(), a, func(sa *gpu.Scope) error {
		return gpu.WithScope(context.Background(), b, func(sb *gpu.Scope) error {
			x, err := sa.Alloc(n)
			require.NoError(t, err)
			y, err := sb.Alloc(n)
			require.NoError(t, err)
			require.NoError(t, x.CopyFromHost(want))
			require.NoError(t, y.CopyFrom(x))
			got := make([]byte, n)
			require.NoError(t, y.CopyToHost(got))
			assert.True(t, bytes.Equal(want, got), "64 MiB from cuda:0 to cuda:1")
			part, err := x.View(1<<20, 4096)
			require.NoError(t, err)
			require.NoError(t, y.CopyFrom(part))
			require.NoError(t, y.CopyToHost(got[:4096]))
			assert.Equal(t, want[1<<20:1<<20+4096], got[:4096], "a view, across devices")
			return nil
		})
	}))
}
