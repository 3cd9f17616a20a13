package gpu

import (
	"context"
	"errors"

	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/scope"
)

// Scope owns the buffers allocated in it and frees them when it ends. A
// Scope is safe for use by many goroutines; they must finish with it before
// it ends.
//
// The state of a scope is reused once it ends (see scope.Scope); a *Scope
// is a small object of its own, and one that has ended fails with
// ErrScopeClosed forever, whatever scope uses its state now.
type Scope struct {
	s   scope.Scope
	dev *Device
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
	if !dev.valid() {
		return errNilDevice
	}
	if fn == nil {
		return prefixed.Errorf("gpu", "WithScope: nil function")
	}
	if ctx == nil {
		return prefixed.Errorf("gpu", "WithScope: nil Context")
	}
	s, err := openScope(ctx, dev, opts)
	if err != nil {
		return err
	}
	defer func() {
		// A device closed while fn ran has torn the scope down: whatever fn
		// returned, its memory is gone, and the caller must hear so.
		torn := dev.closed.Load()
		path, cerr := s.s.End()
		evicted := dev.evict.ended(dev, s).err()
		if r := recover(); r != nil {
			if cerr != nil {
				dev.dropped(prefixed.Wrap("gpu", cerr, "scope %q ended by a panic", path))
			}
			panic(r) // released above; the panic goes on with its own value
		}
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = errors.Join(err, prefixed.Wrap("gpu", cause, "scope %q cancelled", path))
		}
		if evicted != nil && !errors.Is(err, ErrEvicted) {
			err = errors.Join(err, evicted)
		}
		if torn && !errors.Is(err, ErrDeviceClosed) {
			err = errors.Join(err, prefixed.Kind("gpu", ErrDeviceClosed, "while the scope was open (WithScope)"))
		}
		err = errors.Join(err, deviceError(cerr))
	}()
	return fn(s)
}

// NewScope opens a long-lived root scope, such as one for model weights.
// Close frees what it owns.
func (d *Device) NewScope(opts ...ScopeOption) (*Scope, error) {
	return openScope(context.Background(), d, opts)
}

// openScope opens a scope of d, for WithScope and Device.NewScope.
func openScope(ctx context.Context, d *Device, opts []ScopeOption) (*Scope, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	o, err := buildScopeOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.sleepable {
		return openSleepable(ctx, d, o)
	}
	return openScopeWith(ctx, d, o, nil)
}

// openScopeWith opens a scope of d with options o, whose memory comes from
// sl's pool where sl is not nil (a Sleepable scope).
func openScopeWith(ctx context.Context, d *Device, o scopeOptions, sl *sleeper) (*Scope, error) {
	var stream uintptr
	if o.stream != nil {
		if o.stream.dev != d {
			return nil, prefixed.Kind("gpu", ErrWrongScope, "OnStream: a stream of device %s for a scope of %s", o.stream.dev.name, d.name)
		}
		if o.stream.life.ended() {
			return nil, prefixed.Wrap("gpu", errStreamEnded, "OnStream")
		}
		stream = o.stream.id
	}
	var ev *evictState
	if o.evictable {
		ev = &evictState{priority: o.priority}
		ctx, ev.cancel = context.WithCancelCause(ctx)
		ctx = withEvictable(ctx, ev)
	}
	so := scope.Options{Name: o.name, Reserve: o.reserve, Limit: o.limit,
		Zeroed: o.zeroed, Wait: o.wait, Stream: stream, Evictable: o.evictable}
	if sl != nil {
		so.Pool = sl.pool
	}
	if o.reserve > 0 {
		if err := d.injected("Reserve", o.reserve); err != nil {
			return nil, failReserve(ctx, d, so, ev, err)
		}
	}
	h, err := d.tree.Open(ctx, scope.Scope{}, so)
	if err != nil && o.reserve > 0 && isOutOfMemory(err) && d.flushExternal() {
		// What a library freed and its cache held may make room.
		d.evict.absorbed.Add(poolOOMs(err)) // one reservation, one count: the retry's
		h, err = d.tree.Open(ctx, scope.Scope{}, so)
	}
	if err != nil && o.reserve > 0 {
		h, err = reserveEvicting(ctx, d, so, err)
	}
	if err != nil {
		if ev != nil {
			ev.cancel(nil)
		}
		if path, ok := prefixed.Subject(err); ok && isOutOfMemory(err) { // its reservation found no room
			return nil, outOfMemory(ctx, d, path, o.reserve, err)
		}
		return nil, deviceError(err)
	}
	s := &Scope{s: h, dev: d}
	if ev != nil {
		d.evict.add(s, ev)
	}
	return s, nil
}

// failReserve returns the out-of-memory error of a scope whose reservation
// a test's driver failed (gputest.OpRequest), in the scope's words: it
// opens the scope without its reservation, to learn its path, and ends it.
func failReserve(ctx context.Context, d *Device, so scope.Options, ev *evictState, injected error) error {
	if ev != nil {
		defer ev.cancel(nil)
	}
	reserve := so.Reserve
	so.Reserve = 0
	h, err := d.tree.Open(ctx, scope.Scope{}, so)
	if err != nil {
		return deviceError(err) // it would not have opened: that, not the fault
	}
	path := h.Path()
	if _, err := h.End(); err != nil {
		return deviceError(err)
	}
	return outOfMemory(ctx, d, path, reserve, injected)
}

// valid reports whether s is a scope this package made: not nil, not a
// zero Scope.
func (s *Scope) valid() bool { return s != nil && s.s != (scope.Scope{}) }

// Device returns the scope's device; nil for a nil or zero Scope.
func (s *Scope) Device() *Device {
	if !s.valid() {
		return nil
	}
	return s.dev
}

// Path returns the names of the scope and its ancestors, joined by "/"; ""
// for a nil or zero Scope.
func (s *Scope) Path() string {
	if !s.valid() {
		return ""
	}
	return s.s.Path()
}

// Context returns a context carrying the scope: WithScope(s.Context(), ...)
// opens a child. It is done when the scope's own context is done. For a
// nil or zero Scope, or one that has ended, it is a context already done,
// with ErrScopeClosed as its cause, so that a scope opened from it fails
// instead of becoming a root.
func (s *Scope) Context() context.Context {
	if !s.valid() || s.s.Closed() {
		ctx, cancel := context.WithCancelCause(context.Background())
		if cause := s.evictedErr(); cause != nil {
			cancel(cause)
		} else if s.valid() {
			cancel(errEnded)
		} else {
			cancel(errNilScope)
		}
		return ctx
	}
	return s.s.Context()
}

// errNilScope is what the methods of a nil or zero *Scope return.
var errNilScope = prefixed.Kind("gpu", ErrScopeClosed, "nil or zero Scope")

// errEnded is the cause of the Context of a Scope that has ended.
var errEnded = prefixed.Kind("gpu", ErrScopeClosed, "the scope has ended")

// Alloc allocates size bytes owned by the scope. In a scope opened with
// [WaitForMemory] (or inside one) it waits for memory rather than fail. A
// size that is not positive, or above any device (256 TiB), is
// ErrInvalidSize.
func (s *Scope) Alloc(size int64) (Buffer, error) {
	// The pool checks the size, once, where it rounds it
	// (pool.AllocCharged): a size outside (0, pool.MaxSize] comes back from
	// there as ErrInvalidSize, having taken nothing.
	if !s.valid() {
		return Buffer{}, errNilScope
	}
	if err := s.dev.injected("Alloc", size); err != nil {
		return Buffer{}, s.injectedOOM(size, err) // no wait, no eviction: a test said it fails
	}
	if s.s.Inherited().Wait {
		return allocWaiting(s, size)
	}
	b, _, err := s.allocOnce(size)
	return b, err
}

// allocOnce is one attempt of Alloc's. It also returns how many
// out-of-memory errors of the pool's it left counted in Stats.OOMs: 0 or
// 1, whatever error it returns (allocWaiting counts an allocation once).
func (s *Scope) allocOnce(size int64) (Buffer, int64, error) {
	ref, err := s.s.Alloc(size)
	left := int64(0)
	if err != nil {
		ref, left, err = s.afterOutOfMemory(size, err)
	}
	if err != nil {
		if cause := s.evictedErr(); cause != nil {
			return Buffer{}, left, cause
		}
		if isOutOfMemory(err) {
			return Buffer{}, left, outOfMemory(s.s.Context(), s.dev, s.s.Path(), size, err)
		}
		return Buffer{}, left, deviceError(err)
	}
	if s.s.Inherited().Zeroed {
		// On the memory's stream: work its previous owner queued there may
		// still write to it, and must land before the zeros.
		zero := func(ptr, stream uintptr) error { return s.dev.drv.Memset(ptr, 0, size, stream) }
		if err := ref.WithPtr(0, zero); err != nil {
			return Buffer{}, 0, deviceError(errors.Join(prefixed.Wrap("gpu", err, "zeroing %d bytes", size), s.s.Free(ref)))
		}
	}
	return Buffer{dev: s.dev, ref: ref, size: size}, 0, nil
}

// afterOutOfMemory tries again where the first attempt of an allocation
// failed with err: after the cache in front of the pool gave back what it
// held, and after evicting idle evictable scopes. It returns the last
// attempt's result and the pool's out-of-memory errors it left counted.
func (s *Scope) afterOutOfMemory(size int64, err error) (scope.Ref, int64, error) {
	left := poolOOMs(err)
	if !isOutOfMemory(err) {
		return scope.Ref{}, left, err
	}
	var ref scope.Ref
	if s.dev.flushExternal() {
		// What a library freed and its cache held may make room.
		s.dev.evict.absorbed.Add(left) // one allocation, one count: the retry's
		if ref, err = s.s.Alloc(size); err == nil {
			return ref, 0, nil
		}
		left = poolOOMs(err)
	}
	if isOutOfMemory(err) && s.dev.sleep.has.Load() {
		ref, left, err = s.retryAfterSleepersGiveBack(size, ref, left, err)
		if err == nil {
			return ref, 0, nil
		}
	}
	if isOutOfMemory(err) && s.dev.evict.has.Load() {
		return evictFor(s, size, err)
	}
	return ref, left, err
}

// Free releases b before the scope ends, back to the pool. A buffer of a
// [Sleepable] scope asleep is freed too, touching no memory (see
// [Scope.Sleep]): the memory under it was given back already.
func (s *Scope) Free(b Buffer) error {
	if err := s.owns(b.dev, b.view, "freed"); err != nil {
		return err
	}
	if err := s.s.Free(b.ref); err != nil {
		return s.refused(err) // only a failure looks at the eviction
	}
	return nil
}

// Keep moves b to the parent scope, so that it outlives this one. The
// handle stays valid: the parent owns the same Buffer.
func (s *Scope) Keep(b Buffer) error {
	if err := s.owns(b.dev, b.view, "kept"); err != nil {
		return err
	}
	return s.refused(s.s.Keep(b.ref))
}

// owns checks what Free and Keep can check before asking the scope.
func (s *Scope) owns(dev *Device, view int64, verb string) error {
	if !s.valid() {
		return errNilScope
	}
	if dev == nil {
		return errZeroBuffer
	}
	if dev != s.dev {
		return prefixed.Kind("gpu", ErrWrongScope, "buffer of device %s %s through a scope of %s", dev.name, verb, s.dev.name)
	}
	if view != 0 {
		return prefixed.Kind("gpu", ErrWrongScope, "a view cannot be %s; its buffer can", verb)
	}
	return nil
}

// Close ends a scope from [Device.NewScope], freeing what it owns. It is
// idempotent. Scopes of WithScope close themselves.
func (s *Scope) Close() error {
	if !s.valid() {
		return errNilScope
	}
	_, err := s.s.End()
	s.dev.evict.ended(s.dev, s)
	return deviceError(err)
}
