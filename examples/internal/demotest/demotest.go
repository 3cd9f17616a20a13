// Package demotest holds what the examples' tests share: their TestMain,
// which checks for leaked goroutines and GPU memory, and the run of an
// example whose output a test reads.
package demotest

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// Main is an example's TestMain: it runs the tests and fails the binary if
// they leave a goroutine running, a scope open or a buffer live.
func Main(m *testing.M) { goleak.VerifyTestMain(gputest.Wrap(m)) }

// Output runs an example's run, requires it to succeed, logs what it wrote
// and returns it.
func Output(t *testing.T, run func(w io.Writer) error) string {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, run(&out))
	s := out.String()
	t.Log(s)
	return s
}
