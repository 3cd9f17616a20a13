//go:build cuda

package gpu_test

import (
	"bytes"
	"context"
	_ "embed"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
)

// spinFillPTX is testdata/spin_fill.cu compiled by `nvcc -ptx
// -arch=compute_80` (CUDA 13.0): a kernel that spins for a number of clock
// cycles, then fills the first n bytes of a buffer.
//
//go:embed testdata/spin_fill.ptx
var spinFillPTX []byte

// A kernel on stream a spins, then writes P into a buffer that was freed
// while a still used it; stream b allocates, and the only memory there is
// is that buffer's, and writes Q. b must read back Q: it would read P if
// the pool had handed a's memory to b before a's kernel finished.
func TestCrossStreamReuseWaitsForTheKernel(t *testing.T) {
	const size = 2 << 20 // one page: the device may hold nothing else
	const n = 64 << 10   // the bytes the kernel fills
	const P, Q = 0x50, 0x51
	dev, err := gpu.Open(0, gpu.PoolOptions(pool.MaxReserved(size)))
	require.NoError(t, err)
	defer func() { assert.NoError(t, dev.Close()) }()
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		a, err := s.NewStream()
		require.NoError(t, err)
		b, err := s.NewStream()
		require.NoError(t, err)
		mod, err := s.LoadModule(spinFillPTX)
		require.NoError(t, err)
		fn, err := mod.Function("spin_fill")
		require.NoError(t, err)
		var freedAt, kernelDone uintptr
		drv := dev.Driver()
		require.NoError(t, gpu.WithScope(s.Context(), dev, func(sa *gpu.Scope) error {
			buf, err := sa.Alloc(size)
			require.NoError(t, err)
			freedAt = buf.Ptr()
			// About half a second at the H200's clock.
			require.NoError(t, fn.Launch(gpu.Dim{X: n / 256}, gpu.Dim{X: 256}, 0, a, buf, n, uint32(P), int64(1_000_000_000)))
			kernelDone, err = drv.RecordEvent(a.ID())
			require.NoError(t, err)
			done, err := drv.EventDone(kernelDone)
			require.NoError(t, err)
			require.False(t, done, "the kernel spins for about half a second")
			return sa.Free(buf) // while the kernel runs
		}, gpu.OnStream(a), gpu.Name("on a")))
		return gpu.WithScope(s.Context(), dev, func(sb *gpu.Scope) error {
			buf, err := sb.Alloc(size)
			require.NoError(t, err)
			done, err := drv.EventDone(kernelDone)
			require.NoError(t, err)
			assert.True(t, done, "b got memory only once a's kernel had finished")
			require.NoError(t, drv.DestroyEvent(kernelDone))
			t.Logf("b's buffer at %#x, a's was at %#x", buf.Ptr(), freedAt)
			require.NoError(t, buf.Memset(Q))
			require.NoError(t, b.Synchronize())
			require.NoError(t, a.Synchronize()) // the kernel has finished by now
			got := make([]byte, n)
			require.NoError(t, buf.CopyToHost(got))
			assert.True(t, bytes.Equal(bytes.Repeat([]byte{Q}, n), got), "b reads what it wrote, not a's late pattern")
			return nil
		}, gpu.OnStream(b), gpu.Name("on b"))
	}))
}
