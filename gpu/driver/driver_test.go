package driver_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/errdefs"
)

// The package holds interfaces and error types: nothing in it allocates
// device memory, so goroutines are all that could leak.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestOutOfMemoryIsRecognizedByThePool(t *testing.T) {
	cause := errors.New("CUDA_ERROR_OUT_OF_MEMORY")
	err := fmt.Errorf("allocating a segment: %w", &driver.OutOfMemoryError{Requested: 1 << 30, Err: cause})
	assert.True(t, errdefs.IsSourceOutOfMemory(err), "wrapped, it still tells the pool to release and retry")
	assert.ErrorIs(t, err, cause)
	assert.Contains(t, err.Error(), "device out of memory")
	assert.False(t, errdefs.IsSourceOutOfMemory(cause))
}
