package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
	"github.com/gpuscope/gpuscope/gpu"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestRun(t *testing.T) {
	s := demotest.Output(t, run)
	assert.Contains(t, s, "request for 4 MiB: 200 processed 4 MiB\n")
	assert.Contains(t, s, "request for 32 MiB: 413 over the 16.00 MiB a request may hold\n")
	assert.Contains(t, s, "request for 12 MiB: the client gave up after 20 ms, before the server had done 60 ms of work\n")
	assert.Contains(t, s, "  the server saw the request cancelled: its next allocation failed and its scope freed what it held\n")
	assert.Regexp(t, `after the requests:\s+allocated 0 B`, s)
}

func TestMemoryReturnsToBaselineAfterConcurrentAndCancelledRequests(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(1 << 30))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	srv := httptest.NewServer(&handler{dev: dev, step: time.Millisecond})
	defer srv.Close()

	var ok, tooLarge, cancelled atomic.Int32
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mib := 1 + i%20 // 17 to 20 MiB are over the limit
			ctx := context.Background()
			if i%4 == 0 { // a quarter of the clients give up after 3 ms
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 3*time.Millisecond)
				defer cancel()
			}
			status, _, err := get(ctx, srv.URL, mib)
			switch {
			case err != nil:
				assert.ErrorIs(t, err, context.DeadlineExceeded, "request %d", i)
				cancelled.Add(1)
			case status == http.StatusOK:
				assert.LessOrEqual(t, mib, 16, "request %d", i)
				ok.Add(1)
			case status == http.StatusRequestEntityTooLarge:
				assert.Greater(t, mib, 16, "request %d", i)
				tooLarge.Add(1)
			default:
				t.Errorf("request %d: status %d", i, status)
			}
		}()
	}
	wg.Wait()
	assert.Positive(t, cancelled.Load(), "some clients gave up")
	assert.Positive(t, ok.Load())
	assert.Positive(t, tooLarge.Load())
	t.Logf("%d served, %d over the limit, %d cancelled", ok.Load(), tooLarge.Load(), cancelled.Load())
	// Handlers of cancelled requests end at their next allocation.
	require.Eventually(t, func() bool { return dev.Stats().OpenScopes == 0 }, 10*time.Second, 5*time.Millisecond)
	assert.Zero(t, dev.Stats().Allocated, "memory is back to the baseline")
	assert.LessOrEqual(t, dev.Stats().PeakAllocated, int64(100*perRequest))
}
