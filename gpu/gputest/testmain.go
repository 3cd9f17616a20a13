package gputest

import (
	"fmt"
	"io"
	"os"

	"github.com/gpuscope/gpuscope/gpu"
)

// TestingM is the part of *testing.M that VerifyTestMain uses.
type TestingM interface {
	Run() int
}

// VerifyTestMain records allocation stacks, runs the tests, and, if they
// passed, fails the binary when GPU memory is still live. Call it from
// TestMain; it exits the process.
func VerifyTestMain(m TestingM, opts ...Option) {
	os.Exit(Wrap(m, opts...).Run())
}

// Wrap returns a TestingM that runs m's tests with allocation stacks
// recorded, then checks for leaks as VerifyTestMain does; its Run returns a
// non-zero code where the tests or the check failed. It composes with
// goleak: goleak.VerifyTestMain(gputest.Wrap(m)).
func Wrap(m TestingM, opts ...Option) TestingM {
	return wrapped{m, opts, os.Stderr}
}

type wrapped struct {
	m      TestingM
	opts   []Option
	stderr io.Writer // where the check's report goes
}

func (w wrapped) Run() int {
	o := buildOptions(w.opts)
	if err := o.validFor("VerifyTestMain", true); err != nil {
		fmt.Fprintln(w.stderr, err)
		return 1
	}
	gpu.RecordStacks(true)
	defer gpu.RecordStacks(false)
	code := w.m.Run()
	o.running = runningTest() // TestMain's: every test has ended
	if code == 0 {
		if err := find(o); err != nil {
			fmt.Fprintf(w.stderr, "gputest: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	if o.cleanup != nil {
		o.cleanup(code)
	}
	return code
}
