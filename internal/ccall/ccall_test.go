package ccall_test

import (
	"errors"
	"io"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/ccall"
	"github.com/gpuscope/gpuscope/internal/errdefs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Each failure is counted, and the last one's message is kept with the
// name of the call that failed.
func TestFailCountsAndKeepsTheLast(t *testing.T) {
	n, _ := ccall.Failures()
	ccall.Fail("gpuscope_alloc", errors.New("gpu: out of memory"))
	ccall.Fail("gpuscope_free", errors.New("gpu: freed"))
	after, last := ccall.Failures()
	assert.Equal(t, n+2, after)
	assert.Equal(t, "gpuscope_free: gpu: freed", last)
}

// Under SetQuiet(true) a failure the caller is told of is counted and
// kept, not written; one of a call that tells nothing still is.
func TestQuietWritesOnlyWhatTheCallerIsNotTold(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stderr
	os.Stderr = w
	n, _ := ccall.Failures()
	ccall.SetQuiet(true)
	ccall.FailTold("gpuscope_alloc", errors.New("gpu: out of memory"))
	ccall.Fail("gpuscope_free", errors.New("gpu: not allocated"))
	ccall.SetQuiet(false)
	ccall.FailTold("gpuscope_scope_end", errors.New("gpu: no such scope"))
	os.Stderr = saved
	require.NoError(t, w.Close())
	written, err := io.ReadAll(r)
	require.NoError(t, err)
	after, last := ccall.Failures()
	assert.Equal(t, n+3, after)
	assert.Equal(t, "gpuscope_scope_end: gpu: no such scope", last)
	assert.Equal(t, "gpuscope: gpuscope_free: gpu: not allocated\ngpuscope: gpuscope_scope_end: gpu: no such scope\n", string(written))
}

// A size_t beyond int64 is no size of any device's: refused as invalid.
func TestSizeRefusesWhatInt64CannotHold(t *testing.T) {
	n, err := ccall.Size(1 << 40)
	assert.NoError(t, err)
	assert.EqualValues(t, 1<<40, n)
	_, err = ccall.Size(math.MaxUint64)
	assert.ErrorIs(t, err, errdefs.InvalidSize)
	assert.ErrorContains(t, err, "more than any device holds")
}
