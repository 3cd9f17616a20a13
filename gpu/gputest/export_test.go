package gputest

import "io"

// OnRetry calls fn before each retry of the leak check.
func OnRetry(fn func(attempt int)) Option {
	return optionFunc(func(o *options) { o.onRetry = fn })
}

// VerifyTestMainTo is VerifyTestMain with exit in place of os.Exit and
// the report written to w.
func VerifyTestMainTo(exit func(int), w io.Writer, m TestingM, opts ...Option) {
	exit(wrapped{m, opts, w}.Run())
}

// OpeningTest is openingTest, for its table.
var OpeningTest = openingTest

// FindAfter is Find as the check of a test other than the one running,
// named running: the devices the running test opened are those of a test
// that has ended.
func FindAfter(running string, opts ...Option) error {
	o := buildOptions(opts)
	o.running, o.othersEnded = running, true
	return find(o)
}

// FindAs is Find as the check of the test named running, while the tests
// on the goroutines' stacks run.
func FindAs(running string, opts ...Option) error {
	o := buildOptions(opts)
	o.running = running
	return find(o)
}
