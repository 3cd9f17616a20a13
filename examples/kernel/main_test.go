package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestSaxpyMatchesGo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, 10_007)) // not a multiple of the block size
	assert.Contains(t, out.String(), "in two halves on two streams: all 10007 results equal Go's")
	assert.Contains(t, out.String(), "after the scope: 0 bytes allocated")
}
