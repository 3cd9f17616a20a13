package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"

	"github.com/gpuscope/gpuscope/gpu"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestQuickstartShowsMemoryComingBack(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	s := out.String()
	if !gpu.CUDA {
		assert.Regexp(t, `^device: host:\d+ \(host memory, 2.00 GiB\) \(no GPU: this build has no CUDA support; build with -tags cuda to run on GPU 0\)\n`, s)
	}
	assert.Contains(t, s, "all equal")
	assert.Regexp(t, `inside the scope:\s+allocated 3.81 MiB`, s)
	assert.Regexp(t, `after the scope .*allocated 0 B\s+reserved [1-9]`, s)
	assert.Regexp(t, `after EmptyCache:\s+allocated 0 B\s+reserved 0 B`, s)
}
