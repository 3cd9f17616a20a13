package gputest

import (
	"fmt"
	"time"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/registry"
)

// Option changes what counts as a leak or how it is looked for.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	ignoredScopes map[uint64]bool // by ID, from IgnoreCurrent
	ignoredBufs   map[any]bool    // by BufferSnapshot.Key
	ignoredRes    map[uint64]bool // resources, by ID
	ignoredDevs   map[uint64]bool // devices, by the registry's ID
	ignoredNames  []string
	reported      map[any]bool // what earlier checks reported, by the keys of markReported
	running       string       // the test that runs the check, which may yet close the devices it opened; "" in TestMain
	othersEnded   bool         // for tests: every test but running has ended, whatever the stacks say
	devices       []string
	maxRetries    int
	maxSleep      time.Duration
	cleanup       func(code int)
	onRetry       func(attempt int) // for tests
	errs          []error
}

func buildOptions(opts []Option) *options {
	o := &options{maxRetries: 20, maxSleep: 100 * time.Millisecond}
	for _, opt := range opts {
		if opt == nil {
			o.errs = append(o.errs, fmt.Errorf("gputest: nil Option"))
			continue
		}
		opt.apply(o)
	}
	return o
}

// validFor returns an error for options that mean nothing to the caller.
func (o *options) validFor(caller string, testMain bool) error {
	if len(o.errs) > 0 {
		return o.errs[0]
	}
	if o.cleanup != nil && !testMain {
		return fmt.Errorf("gputest: Cleanup is only for VerifyTestMain and Wrap, not %s", caller)
	}
	return nil
}

// IgnoreCurrent ignores the devices open, and the scopes, buffers and other
// resources (streams, events, modules, page-locked memory) live, when it is
// called: what a test inherits is not its leak.
func IgnoreCurrent() Option {
	scopes, bufs, res, devs := map[uint64]bool{}, map[any]bool{}, map[uint64]bool{}, map[uint64]bool{}
	for _, dev := range registry.Devices[*gpu.Snapshot]() {
		devs[dev.ID] = true
		for _, s := range dev.Snapshot.Scopes {
			scopes[s.ID] = true
			for _, b := range s.Buffers {
				bufs[b.Key] = true
			}
			for _, r := range s.Resources {
				res[r.ID] = true
			}
		}
	}
	return optionFunc(func(o *options) {
		o.ignoredScopes, o.ignoredBufs, o.ignoredRes, o.ignoredDevs = scopes, bufs, res, devs
	})
}

// IgnoreScope ignores scopes whose name or path is name, with their
// buffers and their children: memory such a scope holds on purpose (model
// weights, say). A device on which such a scope is open is open on
// purpose too: the check does not report it open.
func IgnoreScope(name string) Option {
	return optionFunc(func(o *options) {
		if name == "" {
			o.errs = append(o.errs, fmt.Errorf("gputest: IgnoreScope needs a name"))
		}
		o.ignoredNames = append(o.ignoredNames, name)
	})
}

// Devices restricts the check to the devices of these names (see
// gpu.Device.Name, such as "host:0" or "cuda:0"); a name without a number
// stands for every device of that kind ("host": every host device).
func Devices(names ...string) Option {
	return optionFunc(func(o *options) {
		if len(names) == 0 {
			o.errs = append(o.errs, fmt.Errorf("gputest: Devices needs at least one name"))
		}
		o.devices = append(o.devices, names...)
	})
}

// MaxSleep bounds the wait between retries (default 100ms); with the
// default 20 retries the check waits about two seconds at most for frees
// still in flight before it reports them.
func MaxSleep(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d <= 0 {
			o.errs = append(o.errs, fmt.Errorf("gputest: MaxSleep(%v) must be positive", d))
		}
		o.maxSleep = d
	})
}

// Cleanup calls fn with the exit code after VerifyTestMain's check, before
// the process exits. It is valid only for VerifyTestMain and Wrap.
func Cleanup(fn func(exitCode int)) Option {
	return optionFunc(func(o *options) { o.cleanup = fn })
}
