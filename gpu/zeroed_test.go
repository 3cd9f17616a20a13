package gpu_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

var secret = []byte("password=hunter2")

// writeSecret leaves secret in memory a scope allocated and freed.
func writeSecret(t *testing.T, dev *gpu.Device) {
	t.Helper()
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(int64(len(secret)))
		require.NoError(t, err)
		return b.CopyFromHost(secret)
	}))
}

// readFresh reads what a new allocation of the same size holds, in a scope
// opened with opts.
func readFresh(t *testing.T, dev *gpu.Device, opts ...gpu.ScopeOption) []byte {
	t.Helper()
	got := make([]byte, len(secret))
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(outer *gpu.Scope) error {
		return gpu.WithScope(outer.Context(), dev, func(s *gpu.Scope) error {
			b, err := s.Alloc(int64(len(secret)))
			require.NoError(t, err)
			return b.CopyToHost(got)
		})
	}, opts...))
	return got
}

func TestFreshBuffersAreUninitializedUnlessZeroed(t *testing.T) {
	t.Run("by default a buffer may hold its memory's previous bytes", func(t *testing.T) {
		dev := openHost(t)
		writeSecret(t, dev)
		assert.Equal(t, secret, readFresh(t, dev), "as cudaMalloc's: cheap, and not scrubbed")
	})
	t.Run("Zeroed on a scope zeroes its children's allocations too", func(t *testing.T) {
		dev := openHost(t)
		writeSecret(t, dev)
		assert.Equal(t, make([]byte, len(secret)), readFresh(t, dev, gpu.Zeroed()))
	})
	t.Run("a device that scrubs what is freed leaks nothing to the next owner", func(t *testing.T) {
		dev := openHost(t, gpu.ScrubFreed())
		writeSecret(t, dev)
		got := readFresh(t, dev)
		assert.False(t, bytes.Contains(got, []byte("hunter2")))
		assert.Equal(t, make([]byte, len(secret)), got)
	})
}
