package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu/gputest"
)

func TestMoreMicroBatchesLowerThePeakAndKeepTheGradient(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	s := out.String()
	t.Log(s)
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

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m))
}
