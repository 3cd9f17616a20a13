package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestADatasetLargerThanTheDeviceStreamsThroughIt(t *testing.T) {
	s := demotest.Output(t, run)
	assert.Contains(t, s, "sum of 134217728 values: 67037936896 (computed on the host: 67037936896, equal: true)")
	assert.Contains(t, s, "results kept by the parent: 64 buffers, 32.00 KiB")
	assert.Regexp(t, `all chunks done:\s+allocated 32.00 KiB\s+peak 8.03 MiB`, s)
	assert.Regexp(t, `after:\s+allocated 0 B`, s)
	assert.Contains(t, s, "peak 8.03 MiB of a 64.00 MiB device for 512.00 MiB of data: under capacity true")
}
