package gpu

import (
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/scope"
)

// Stream is a queue of device work, owned by the scope that made it: when
// the scope ends, the work queued on the stream completes before the
// scope's memory is released, and the stream is destroyed after (releasing
// memory may queue zeros on it, see [ScrubFreed]). Its methods fail with
// ErrScopeClosed from the moment the scope begins to release.
type Stream struct {
	dev   *Device
	id    uintptr
	owner scope.Scope // the scope that made it, which owns its events too
	life  lifetime
}

// NewStream makes a stream owned by the scope.
func (s *Scope) NewStream() (*Stream, error) {
	if !s.valid() {
		return nil, errNilScope
	}
	id, err := s.dev.drv.NewStream()
	if err != nil {
		return nil, deviceError(fmt.Errorf("gpu: NewStream: %w", err))
	}
	st := &Stream{dev: s.dev, id: id, owner: s.s}
	// Its work completes before the scope's memory is released; it is
	// destroyed after, since releasing memory (ScrubFreed) queues work on
	// it.
	if _, err := s.s.OwnResource(scope.Resource{Kind: "stream", End: st.finish, Final: st.end}); err != nil {
		return nil, deviceError(errors.Join(err, st.finish(), st.end()))
	}
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
var errNilStream = fmt.Errorf("%w: nil or zero Stream", ErrScopeClosed)

// errStreamEnded is what the methods of a Stream return once it has ended.
var errStreamEnded = fmt.Errorf("%w: the stream ended with its scope", ErrScopeClosed)

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
	err := st.dev.pool.RetireStream(st.id) // waits for what the release queued
	errs := []error{err, st.dev.drv.DestroyStream(st.id)}
	if err != nil {
		// Destroyed, its work is done: the pool may let it go now.
		errs = append(errs, st.dev.pool.RetireStream(st.id))
	}
	return errors.Join(errs...)
}

// Event marks a point in a stream's work: it is done once the work queued
// on the stream before it has completed. It belongs to the stream's scope
// and ends with it, or with [Event.Release], whichever comes first: an
// event of a long-lived stream lives until Release.
type Event struct {
	st    *Stream
	id    uintptr
	owned scope.Owned
	life  lifetime
}

// Record records an event at the end of the work queued on st so far.
func (st *Stream) Record() (*Event, error) {
	if !st.valid() {
		return nil, errNilStream
	}
	var ev *Event
	err := st.life.use(errStreamEnded, func() error {
		id, err := st.dev.drv.RecordEvent(st.id)
		if err != nil {
			return deviceError(fmt.Errorf("gpu: recording an event: %w", err))
		}
		ev = &Event{st: st, id: id}
		if ev.owned, err = st.owner.OwnResource(scope.Resource{Kind: "event", End: ev.end}); err != nil {
			return deviceError(errors.Join(err, ev.end()))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ev, nil
}

// valid reports whether ev is an event this package made.
func (ev *Event) valid() bool { return ev != nil && ev.st != nil }

// errNilEvent is what the methods of a nil or zero *Event return.
var errNilEvent = fmt.Errorf("%w: nil or zero Event", ErrScopeClosed)

// errEventEnded is what an Event's methods return once its stream ended.
var errEventEnded = fmt.Errorf("%w: the event ended with its stream", ErrScopeClosed)

// Done reports whether the work before the event has completed.
func (ev *Event) Done() (bool, error) {
	if !ev.valid() {
		return false, errNilEvent
	}
	var done bool
	err := ev.life.use(errEventEnded, func() error {
		var err error
		done, err = ev.st.dev.drv.EventDone(ev.id)
		return deviceError(err)
	})
	return done, err
}

// Wait waits until the work before the event has completed.
func (ev *Event) Wait() error {
	if !ev.valid() {
		return errNilEvent
	}
	return ev.life.use(errEventEnded, func() error { return deviceError(ev.st.dev.drv.WaitEvent(ev.id)) })
}

// Release destroys the event now rather than with its stream's scope.
// Its methods fail with ErrScopeClosed after. Release is idempotent.
func (ev *Event) Release() error {
	if !ev.valid() {
		return errNilEvent
	}
	ev.owned.Disown() // else the scope is ending it, and end runs once
	return deviceError(ev.end())
}

// end destroys the event, once: Release, or its scope as it ends.
func (ev *Event) end() error {
	return ev.life.end(func() error { return ev.st.dev.drv.DestroyEvent(ev.id) })
}
