package gputest

import "io"

// OnRetry calls fn before each retry of the leak check.
func OnRetry(fn func(attempt int)) Option {
	return optionFunc(func(o *options) { o.onRetry = fn })
}

// SetTestMainHooks replaces os.Exit and os.Stderr, returning a restore.
func SetTestMainHooks(exit func(int), w io.Writer) func() {
	oldExit, oldErr := osExit, stderr
	osExit, stderr = exit, w
	return func() { osExit, stderr = oldExit, oldErr }
}
