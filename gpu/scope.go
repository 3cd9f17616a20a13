package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/scope"
)

var contextBackground = context.Background()

// Scope owns the buffers allocated in it and frees them when it ends. A
// Scope is safe for use by many goroutines; they must finish with it before
// it ends.
type Scope struct {
	s   *scope.Scope // points to own, below
	dev *Device
	own scope.Scope
}

// WithScope opens a scope on dev, calls fn with it, and frees everything the
// scope still owns when fn returns or panics, last allocated first.
//
//   - fn's error is returned, joined with any release errors.
//   - A panic in fn releases the scope, then continues with its value.
//   - If ctx is done before fn is called, fn is not called and the context's
//     cause is returned. Once ctx is done, allocations in the scope and its
//     children fail with an error that errors.Is the cause, and WithScope
//     returns it. Memory is released only when fn returns: never while fn
//     may still use it.
//   - If ctx carries a scope of dev (from [Scope.Context]), the new scope is
//     its child.
func WithScope(ctx context.Context, dev *Device, fn func(s *Scope) error, opts ...ScopeOption) (err error) {
	if dev == nil {
		return fmt.Errorf("%w: nil Device", ErrNoDevice)
	}
	if fn == nil {
		return errors.New("gpu: WithScope: nil function")
	}
	if ctx == nil {
		return errors.New("gpu: WithScope: nil Context")
	}
	var parent *scope.Scope
	if ps, ok := scope.FromContext(ctx); ok && ps.Tree() == dev.tree {
		parent = ps
	}
	s, err := dev.open(parent, ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		cerr := s.s.Close()
		if r := recover(); r != nil {
			panic(r) // released above; the panic goes on with its own value
		}
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = errors.Join(err, cause)
		}
		err = errors.Join(err, cerr)
	}()
	return fn(s)
}

func (d *Device) open(parent *scope.Scope, ctx context.Context, opts []ScopeOption) (*Scope, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil Device", ErrNoDevice)
	}
	if d.closed.Load() {
		return nil, ErrDeviceClosed
	}
	o, err := buildScopeOptions(opts)
	if err != nil {
		return nil, err
	}
	s := &Scope{dev: d}
	s.s = &s.own
	if err := d.tree.OpenInto(ctx, parent, scope.Options{Name: o.name, Reserve: o.reserve, Limit: o.limit}, s.s); err != nil {
		return nil, err
	}
	return s, nil
}

// Device returns the scope's device.
func (s *Scope) Device() *Device { return s.dev }

// Path returns the names of the scope and its ancestors, joined by "/".
func (s *Scope) Path() string { return s.s.Path() }

// Context returns a context carrying the scope: WithScope(s.Context(), ...)
// opens a child. It is done when the scope's own context is done.
func (s *Scope) Context() context.Context { return s.s.Context() }

// errNilScope is what the methods of a nil *Scope return.
var errNilScope = fmt.Errorf("%w: nil Scope", ErrScopeClosed)

// Alloc allocates size bytes owned by the scope.
func (s *Scope) Alloc(size int64) (*Buffer, error) {
	if s == nil {
		return nil, errNilScope
	}
	b := new(Buffer)
	b.dev = s.dev
	b.a = &b.own
	if err := s.s.AllocInto(size, b.a); err != nil {
		return nil, deviceError(err)
	}
	return b, nil
}

// Free releases b before the scope ends, back to the pool.
func (s *Scope) Free(b *Buffer) error {
	if s == nil {
		return errNilScope
	}
	if b == nil {
		return fmt.Errorf("%w: nil Buffer", ErrWrongScope)
	}
	if b.dev != s.dev {
		return fmt.Errorf("%w: buffer of device %s freed through a scope of %s", ErrWrongScope, b.dev.name, s.dev.name)
	}
	return s.s.Free(b.a)
}

// Keep moves b to the parent scope, so that it outlives this one.
func (s *Scope) Keep(b *Buffer) error {
	if s == nil {
		return errNilScope
	}
	if b == nil {
		return fmt.Errorf("%w: nil Buffer", ErrWrongScope)
	}
	if b.dev != s.dev {
		return fmt.Errorf("%w: buffer of device %s kept through a scope of %s", ErrWrongScope, b.dev.name, s.dev.name)
	}
	return s.s.Keep(b.a)
}

// Close ends a scope from [Device.NewScope], freeing what it owns. It is
// idempotent. Scopes of WithScope close themselves.
func (s *Scope) Close() error {
	if s == nil {
		return errNilScope
	}
	return s.s.Close()
}

// ScopeStats describes a scope.
type ScopeStats = scope.Stats

// Stats returns the scope's counters.
func (s *Scope) Stats() ScopeStats { return s.s.Stats() }
