package gpu

import (
	"errors"
	"sync"

	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/scope"
)

// Stream is a queue of device work, owned by the scope that made it: when
// the scope ends, the work queued on the stream completes before the
// scope's memory is released, and the stream is destroyed after (releasing
// memory may queue zeros on it, see [ScrubFreed]). Its methods fail with
// ErrScopeClosed from the moment the scope begins to release.
type Stream struct {
	dev     *Device
	id      uintptr
	owner   scope.Scope // the scope that made it, which owns its events too
	life    lifetime
	foreign bool // made by other code (UseStream): never destroyed here

	evMu   sync.Mutex // protects following fields
	oldest *Event     // the events recorded on it and not yet seen done, oldest first (Event.next)
	newest *Event
}

// NewStream makes a stream owned by the scope.
func (s *Scope) NewStream() (*Stream, error) {
	if !s.valid() {
		return nil, errNilScope
	}
	if cause := s.evictedErr(); cause != nil {
		return nil, cause
	}
	id, err := s.dev.drv.NewStream()
	if err != nil {
		return nil, deviceError(prefixed.Wrap("gpu", err, "NewStream"))
	}
	return s.ownStream(&Stream{dev: s.dev, id: id, owner: s.s})
}

// UseStream returns a Stream for a stream of the device that other code
// made, such as a library's cudaStream_t: h is its handle, which a driver
// with a method AdoptStream(h uintptr) (id uintptr, err error) turns into
// its own id (gpu/cuda's and the host device's do; the host device makes a
// stream for a handle it does not know), and which is the id itself on
// others. It is for [OnStream] and [Buffer.RecordUse]:
// memory used on it is reused on another stream only once the work queued
// on it has completed. The scope owns the Stream as it owns NewStream's,
// except that the stream stays its maker's: when the scope ends, the work
// queued on it completes before the scope's memory is released, and it is
// not destroyed. h 0 is the default stream: RecordUse of it keeps a
// buffer of a scope on another stream from reuse until the default
// stream's work has completed (a library's record_stream onto it).
func (s *Scope) UseStream(h uintptr) (*Stream, error) {
	if !s.valid() {
		return nil, errNilScope
	}
	id := h
	if a, ok := s.dev.drv.(interface {
		AdoptStream(h uintptr) (uintptr, error)
	}); ok {
		var err error
		if id, err = a.AdoptStream(h); err != nil {
			return nil, deviceError(prefixed.Wrap("gpu", err, "UseStream(%#x)", h))
		}
	}
	return s.ownStream(&Stream{dev: s.dev, id: id, owner: s.s, foreign: true})
}

// ownStream makes the scope own st, from NewStream or UseStream.
func (s *Scope) ownStream(st *Stream) (*Stream, error) {
	id := st.id
	// Its work completes before the scope's memory is released; it is
	// destroyed after, since releasing memory (ScrubFreed) queues work on
	// it.
	if _, err := s.s.OwnResource(scope.Resource{Kind: "stream", End: st.finish, Final: st.end}); err != nil {
		return nil, s.refused(errors.Join(err, st.finish(), st.end()))
	}
	s.dev.evict.ownStream(s, id) // an evictable scope is busy while work is queued on it
	return st, nil
}

// ID returns the driver's handle of the stream, for kernels and drivers;
// it is meaningless once the stream has ended.
func (st *Stream) ID() uintptr {
	if st == nil {
		return 0
	}
	return st.id
}

// valid reports whether st is a stream this package made: not nil, not a
// zero Stream.
func (st *Stream) valid() bool { return st != nil && st.dev != nil }

// errNilStream is what the methods of a nil or zero *Stream return.
var errNilStream = prefixed.Kind("gpu", ErrScopeClosed, "nil or zero Stream")

// errStreamEnded is what the methods of a Stream return once it has ended.
var errStreamEnded = prefixed.Kind("gpu", ErrScopeClosed, "the stream ended with its scope")

// Synchronize waits until the work queued on the stream has completed, and
// reports the first error of work that ran asynchronously.
func (st *Stream) Synchronize() error {
	if !st.valid() {
		return errNilStream
	}
	return st.life.use(errStreamEnded, func() error { return deviceError(st.dev.drv.Synchronize(st.id)) })
}

// finish waits for the work queued on the stream and takes it out of
// use: the scope calls it as it ends, before its memory is released.
func (st *Stream) finish() error {
	return st.life.end(func() error { return st.dev.drv.Synchronize(st.id) })
}

// end tells the pool to stop waiting on the stream and destroys it, once
// the scope's memory is released. It runs once.
func (st *Stream) end() error {
	st.forgetEvents()
	if st.foreign {
		// Its maker's: the pool keeps waiting on it, and other scopes may
		// use it still.
		return nil
	}
	err := errors.Join(st.dev.pool.RetireStream(st.id), st.dev.sleep.retireStream(st.id)) // waits for what the release queued
	errs := []error{err, st.dev.destroyStream(st.id)}
	if err != nil {
		// Destroyed, its work is done: the pool may let it go now.
		errs = append(errs, st.dev.pool.RetireStream(st.id))
	}
	return errors.Join(errs...)
}
