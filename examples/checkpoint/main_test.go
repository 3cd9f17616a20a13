package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu/gputest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m))
}

func TestACrashedRunResumesFromItsCheckpoint(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, t.TempDir()))
	s := out.String()
	t.Log(s)
	assert.Regexp(t, `inside, at step 5:\s+allocated 1.00 MiB\s+peak 2.00 MiB`, s, "the parameters, and a step's gradient at its peak")
	assert.Contains(t, s, "step 10: checkpoint saved\nfirst run ended: step 12: simulated crash (the crash: true)")
	assert.Regexp(t, `after the crash:\s+allocated 0 B`, s, "the cancelled scope freed everything")
	assert.Contains(t, s, "restoring the checkpoint of step 10\nrestored 1.00 MiB into a fresh scope: equal to the saved bytes: true")
	assert.Contains(t, s, "step 20: checkpoint saved")
	assert.Regexp(t, `after the second run:\s+allocated 0 B`, s)
	assert.Contains(t, s, "parameters at step 20: 210, as a run without the crash would have them: true")
}
