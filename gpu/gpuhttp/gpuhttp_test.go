package gpuhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gpuhttp"
)

func TestProfileHandler(t *testing.T) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	weights, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	_, err = weights.Alloc(4096)
	require.NoError(t, err)
	serve := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		gpuhttp.ProfileHandler(dev).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/gpu0", nil))
		return rec
	}

	t.Run("it serves the device's live buffers as a profile go tool pprof reads", func(t *testing.T) {
		rec := serve()
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, "application/octet-stream", rec.Header().Get("Content-Type"))
		p, err := profile.Parse(rec.Body)
		require.NoError(t, err)
		require.Len(t, p.Sample, 1)
		assert.Equal(t, []int64{1, 4096}, p.Sample[0].Value, "one buffer, its bytes")
		assert.Equal(t, []string{"weights"}, p.Sample[0].Label["scope"])
	})
	t.Run("a closed device is answered 500 with the error", func(t *testing.T) {
		require.NoError(t, weights.Close())
		require.NoError(t, dev.Close())
		rec := serve()
		assert.Equal(t, http.StatusInternalServerError, rec.Code)
		assert.Contains(t, rec.Body.String(), gpu.ErrDeviceClosed.Error())
	})
}
