package gpu_test

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
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

// handOverOnABusyStream frees a buffer whose last write is still queued on
// a held stream, allocates the same memory again on that stream in a scope
// opened with opts, lets the stream run and returns what the new owner
// reads there.
func handOverOnABusyStream(t *testing.T, dev *gpu.Device, faults *gputest.Faults, opts ...gpu.ScopeOption) []byte {
	t.Helper()
	got := make([]byte, 4096)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, release := heldStream(t, faults, s)
		defer release()
		var ptr uintptr
		require.NoError(t, gpu.WithScope(s.Context(), dev, func(prev *gpu.Scope) error {
			b, err := prev.Alloc(4096)
			require.NoError(t, err)
			ptr = b.Ptr()
			return b.Memset(0xAA) // queued behind the hold
		}, gpu.OnStream(st)))
		return gpu.WithScope(s.Context(), dev, func(next *gpu.Scope) error {
			b, err := next.Alloc(4096)
			require.NoError(t, err)
			require.Equal(t, ptr, b.Ptr(), "the stream reuses its memory at once")
			release()
			return b.CopyToHost(got) // on the stream, after everything queued there
		}, append(opts, gpu.OnStream(st))...)
	}))
	return got
}

func TestZeroedOrdersItsZerosOnTheScopesStream(t *testing.T) {
	dev, faults := openTestHost(t)
	assert.Equal(t, make([]byte, 4096), handOverOnABusyStream(t, dev, faults, gpu.Zeroed()),
		"the previous owner's queued write lands before the zeros")
}

func TestScrubFreedOrdersItsZerosOnTheMemorysStream(t *testing.T) {
	dev, faults := openTestHost(t, gpu.ScrubFreed())
	assert.Equal(t, make([]byte, 4096), handOverOnABusyStream(t, dev, faults),
		"the previous owner's queued write lands before the scrub")
}

// waitBlockedIn waits until a goroutine's stack holds fn, or done is
// closed.
func waitBlockedIn(fn string, done <-chan struct{}) {
	buf := make([]byte, 1<<20)
	for {
		select {
		case <-done:
			return
		default:
		}
		if strings.Contains(string(buf[:runtime.Stack(buf, true)]), fn) {
			return
		}
		runtime.Gosched()
	}
}

func TestScrubFreedZeroesAfterTheWritesOfOtherStreamsThatUsedTheBuffer(t *testing.T) {
	dev, drv := openTestHost(t, gpu.ScrubFreed())
	got := make([]byte, 4096)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		other, release := heldStream(t, drv, s)
		defer release()
		freed := make(chan struct{})
		go func() {
			// The free waits for the other stream: let it run then (or
			// once the free has returned without waiting).
			waitBlockedIn("pool.(*Pool).WaitForUses", freed)
			release()
		}()
		var ptr uintptr
		require.NoError(t, gpu.WithScope(s.Context(), dev, func(prev *gpu.Scope) error {
			b, err := prev.Alloc(4096)
			require.NoError(t, err)
			ptr = b.Ptr()
			require.NoError(t, b.RecordUse(other))
			return dev.Driver().Memset(ptr, 0xAA, 4096, other.ID()) // queued behind the hold
		}))
		close(freed)
		require.NoError(t, other.Synchronize())
		return gpu.WithScope(s.Context(), dev, func(next *gpu.Scope) error {
			b, err := next.Alloc(4096)
			require.NoError(t, err)
			require.Equal(t, ptr, b.Ptr(), "the memory is reused once the other stream has passed the free")
			return b.CopyToHost(got)
		})
	}))
	assert.Equal(t, make([]byte, 4096), got, "the other stream's write landed before the scrub")
}
