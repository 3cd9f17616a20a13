package gpu

import (
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/pool"
)

// requestInjector is a driver that fails allocations a scope asks for
// before the pool sees them: gputest's faulty device (gputest.OpRequest),
// whose tests fail a warm allocation the pool would serve from its cache
// with no driver call. It is no contract for drivers, and unexported.
type requestInjector interface {
	// InjectRequest returns the failure injected into an allocation of
	// size bytes by method ("Alloc", "AllocHost" or "Reserve"), or nil.
	InjectRequest(method string, size int64) error
}

// injected returns the failure d's driver injects into an allocation a
// scope asks for, or nil: at once where the driver injects none (small
// enough to inline on the hot path).
func (d *Device) injected(method string, size int64) error {
	if d.inject == nil {
		return nil
	}
	return d.askInjector(method, size)
}

// askInjector is injected's question to a driver that injects faults,
// kept out of injected so that injected inlines.
//
//go:noinline
func (d *Device) askInjector(method string, size int64) error {
	if size <= 0 || size > pool.MaxSize {
		return nil // no fault for a size the pool refuses: the caller hears that instead
	}
	if err := d.inject.InjectRequest(method, size); err != nil {
		return &injectedFault{err}
	}
	return nil
}

// injectedFault is a failure a test's driver injected into a request: the
// cause of the out-of-memory error the request returns, which advises
// nothing, since no memory was short.
type injectedFault struct{ err error }

func (f *injectedFault) Error() string { return f.err.Error() }
func (f *injectedFault) Unwrap() error { return f.err }

// Text is the fault's message without its package's prefix, as the
// message of the error that wraps it writes it (prefixed.Texter).
func (f *injectedFault) Text() string { return prefixed.Text(f.err) }

// injectedOOM is the out-of-memory error of an allocation of size bytes in
// s that a test's driver failed.
//
//go:noinline
func (s *Scope) injectedOOM(size int64, fault error) error {
	return outOfMemory(s.s.Context(), s.dev, s.s.Path(), size, fault)
}
