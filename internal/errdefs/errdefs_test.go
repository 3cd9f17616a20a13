package errdefs_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEachSentinelSpeaksForGPUAndIsDistinct(t *testing.T) {
	all := []error{errdefs.OutOfMemory, errdefs.InvalidSize, errdefs.ScopeClosed, errdefs.Freed,
		errdefs.WrongScope, errdefs.NotKept, errdefs.NoDevice, errdefs.Closed, errdefs.Asleep}
	seen := map[string]bool{}
	for _, err := range all {
		assert.True(t, strings.HasPrefix(err.Error(), "gpu: "), err.Error())
		assert.False(t, seen[err.Error()], "one message per failure: %q", err.Error())
		seen[err.Error()] = true
	}
	wrapped := prefixed.Kind("pool", errdefs.InvalidSize, "%d bytes", 0)
	assert.EqualError(t, wrapped, "pool: invalid size: 0 bytes", "a layer says the sentinel's text under its own prefix")
	assert.ErrorIs(t, wrapped, errdefs.InvalidSize)
}
