//go:build !cuda

package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCUDAInABuildWithoutItSaysWhichBuildHasIt(t *testing.T) {
	var o, e bytes.Buffer
	err := run([]string{"replay", "--driver", "cuda", traceFile("mlp_train")}, &o, &e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-tags cuda")
	err = run([]string{"replay", "--driver", "cuda", "--capacity", "1000", traceFile("mlp_train")}, &o, &e)
	assert.ErrorContains(t, err, "--capacity is the simulated device's, for --driver sim", "capacity is the simulator's")
}
