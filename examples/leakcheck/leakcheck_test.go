package leakcheck_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/examples/leakcheck"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// TestMain fails the test binary if any test leaves a scope open or a
// buffer live, and shows where each was allocated.
func TestMain(m *testing.M) {
	gputest.VerifyTestMain(m)
}

func TestCacheFreesWhatItReplaces(t *testing.T) {
	defer goleak.VerifyNone(t) // goroutines too
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	defer dev.Close()
	c, err := leakcheck.New(dev)
	require.NoError(t, err)
	defer c.Close()

	// Memory must not grow while the same keys are overwritten.
	i := 0
	gputest.Steady(t, 3, 20, func() error {
		i++
		return c.Put(fmt.Sprint("key", i%3), make([]byte, 4096))
	})
}
