//go:build !cuda

package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWithoutCUDAItSaysWhatItNeeds(t *testing.T) {
	require.ErrorContains(t, run(io.Discard), "-tags cuda")
}
