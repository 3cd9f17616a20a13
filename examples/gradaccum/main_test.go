package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMoreMicroBatchesLowerThePeakAndKeepTheGradient(t *testing.T) {
	s := demotest.Output(t, run)
	// 3 activations of 512 x 4 KiB, and the 4 KiB accumulator.
	assert.Contains(t, s, "1 micro-batch(es) of 512 rows: peak 6.00 MiB\n")
	// 3 activations of 64 x 4 KiB, and the accumulator.
	assert.Contains(t, s, "8 micro-batch(es) of 64 rows: peak 772.00 KiB\n")
	assert.Contains(t, s, "the same gradient both ways: true")
	assert.Regexp(t, `inside, 8 micro-batch\(es\) done:\s+allocated 4.00 KiB`, s, "only the accumulator outlives the micro-batches")
	assert.Regexp(t, `after:\s+allocated 0 B`, s)
	col := -1
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, " allocated "); i >= 0 && !strings.HasPrefix(line, "device") {
			if col < 0 {
				col = i
			}
			assert.Equal(t, col, i, "the columns line up: %q", line)
		}
	}
}

func TestMain(m *testing.M) { demotest.Main(m) }
