package ccall_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
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

// A size_t beyond int64 is no size of any device's: refused as invalid.
func TestSizeRefusesWhatInt64CannotHold(t *testing.T) {
	n, err := ccall.Size(1 << 40)
	assert.NoError(t, err)
	assert.EqualValues(t, 1<<40, n)
	_, err = ccall.Size(math.MaxUint64)
	assert.ErrorIs(t, err, errdefs.InvalidSize)
	assert.ErrorContains(t, err, "more than any device holds")
}
