package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestAllocatedPlateausAtTheWeights(t *testing.T) {
	s := demotest.Output(t, run)
	assert.Contains(t, s, "allocated between batches: 16.00 MiB in each of 50 batches: plateau true")
	assert.Contains(t, s, "weights 16.00 MiB + one batch of activations 5.00 MiB = peak 21.00 MiB")
	for _, batch := range []string{"10", "20", "30", "40", "50"} {
		assert.Regexp(t, `after batch `+batch+`:\s+allocated 16.00 MiB\s+peak 21.00 MiB`, s)
	}
	assert.Regexp(t, `weights closed:\s+allocated 0 B`, s)
	assert.Regexp(t, `after EmptyCache:\s+allocated 0 B\s+peak 21.00 MiB\s+reserved 0 B`, s)
	assert.Regexp(t, `EmptyCache gave back [1-9]`, s)
}
