//go:build cuda

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestCublasGEMMsTakeTheirWorkspaceFromAScope(t *testing.T) {
	out := demotest.Output(t, run)
	assert.Contains(t, out, `cuBLAS workspace: 32 MiB from scope "gemm/cublas workspace"`)
	assert.Regexp(t, `(?m)^    cublas workspace +32\.00 MiB`, out, "the Summary shows the workspace's scope while the GEMMs run")
	for _, line := range []string{
		"sgemm 256x384x512: all 98304 results equal Go's",
		"sgemm 1000x1x777: all 1000 results equal Go's",
		"sgemm 63x4096x129: all 258048 results equal Go's",
		"after the scopes: 0 bytes allocated",
	} {
		assert.Contains(t, out, line)
	}
}
