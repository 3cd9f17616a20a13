package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestACrashedRunResumesFromItsCheckpoint(t *testing.T) {
	s := demotest.Output(t, func(w io.Writer) error { return run(w, t.TempDir()) })
	assert.Regexp(t, `inside, at step 5:\s+allocated 1.00 MiB\s+peak 2.00 MiB`, s, "the parameters, and a step's gradient at its peak")
	assert.Contains(t, s, "step 10: checkpoint saved\nfirst run ended: step 12: gpu: context done before the scope opened: simulated crash (the crash: true)")
	assert.Regexp(t, `after the crash:\s+allocated 0 B`, s, "the cancelled scope freed everything")
	assert.Contains(t, s, "restoring the checkpoint of step 10\nrestored 1.00 MiB into a fresh scope: equal to the saved bytes: true")
	assert.Contains(t, s, "step 20: checkpoint saved")
	assert.Regexp(t, `after the second run:\s+allocated 0 B`, s)
	assert.Contains(t, s, "parameters at step 20: 210, as a run without the crash would have them: true")
}
