package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A replay out of memory on the simulated device says how much memory the
// device had and which flag gives it more.
func TestOutOfMemoryNamesTheSimulatedCapacity(t *testing.T) {
	res, err := runReplayOOM(t, "--capacity", "400000000", traceFile("mlp_train"))
	require.Error(t, err)
	assert.Positive(t, res.OOMs)
	assert.Contains(t, err.Error(), "the simulated device has 400000000 bytes (381.47 MiB) (--capacity)")
	assert.NotContains(t, err.Error(), "--max-reserved", "no cap was given")

	_, err = runReplayOOM(t, "--max-reserved", "400000000", traceFile("mlp_train"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the pool's cap is 400000000 bytes (381.47 MiB) (--max-reserved)")
	assert.Contains(t, err.Error(), "(--capacity)", "the device's memory is said too")
}
