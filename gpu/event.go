package gpu

import (
	"errors"

	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/scope"
)

// Event marks a point in a stream's work: it is done once the work queued
// on the stream before it has completed.
//
// Until it is done, the event belongs to its stream's scope, which ends it
// with the stream. Once it is seen done (Wait returns, Done reports true,
// or a later Record on the stream finds the stream past it), it gives its
// driver event back and its scope no longer holds it: a done event holds
// nothing but itself, so a loop that records and waits on a long-lived
// stream stays flat without [Event.Release]. A done event keeps answering
// (Done reports true, Wait returns at once) until its stream's scope
// ends. After that, or after Release, its methods fail with
// ErrScopeClosed. An Event is safe for use by many goroutines.
type Event struct {
	st    *Stream
	id    uintptr
	owned scope.Owned
	life  lifetime // ends with Release, or with the scope while not done
	done  bool     // seen done, its driver event destroyed; under life.mu
	next  *Event   // the next event recorded on st and not seen done; under st.evMu
}

// Record records an event at the end of the work queued on st so far. It
// also gives back the driver events of earlier events on st that st has
// passed.
func (st *Stream) Record() (*Event, error) {
	if !st.valid() {
		return nil, errNilStream
	}
	var ev *Event
	err := st.life.use(errStreamEnded, func() error {
		id, err := st.dev.drv.RecordEvent(st.id)
		if err != nil {
			return deviceError(prefixed.Wrap("gpu", err, "recording an event"))
		}
		ev = &Event{st: st, id: id}
		if ev.owned, err = st.owner.OwnResource(scope.Resource{Kind: "event", End: ev.end}); err != nil {
			return deviceError(errors.Join(err, ev.end()))
		}
		st.queueEvent(ev) // in the order of the stream's work: uses run one at a time
		return nil
	})
	if err != nil {
		return nil, err
	}
	st.passEvents(ev)
	return ev, nil
}

// queueEvent appends ev to the stream's events not yet seen done.
func (st *Stream) queueEvent(ev *Event) {
	st.evMu.Lock()
	defer st.evMu.Unlock()
	if st.newest == nil {
		st.oldest = ev
	} else {
		st.newest.next = ev
	}
	st.newest = ev
}

// passEvents gives back the driver events of the stream's oldest events
// that the stream has passed, up to but not including last. A stream runs
// its work in order, so it stops at the first event not done: one query
// per Record besides the events it passes, none where they were waited
// for. An error is the device's to report (no caller asked): the event
// stays with its scope.
func (st *Stream) passEvents(last *Event) {
	for {
		st.evMu.Lock()
		ev := st.oldest
		st.evMu.Unlock()
		if ev == nil || ev == last {
			return
		}
		done, err := ev.poll()
		if err != nil {
			st.dev.dropped(err)
		}
		if !done {
			return
		}
		st.evMu.Lock()
		if st.oldest == ev { // else another Record took it
			st.oldest, ev.next = ev.next, nil
			if st.oldest == nil {
				st.newest = nil
			}
		}
		st.evMu.Unlock()
	}
}

// forgetEvents drops the stream's queue as the stream ends: the scope has
// ended the events on it.
func (st *Stream) forgetEvents() {
	st.evMu.Lock()
	defer st.evMu.Unlock()
	for ev := st.oldest; ev != nil; {
		ev, ev.next = ev.next, nil
	}
	st.oldest, st.newest = nil, nil
}

// poll reports whether ev needs no more of the stream's queue: it is done
// (and gives its driver event back) or has ended.
func (ev *Event) poll() (bool, error) {
	var done bool
	err := ev.life.use(nil, func() error {
		var err error
		done, err = ev.doneLocked()
		return err
	})
	return done || ev.life.ended(), err
}

// doneLocked reports whether ev is done, asking the driver unless it was
// seen done, and gives its driver event back once it is. Called with
// ev.life.mu held.
func (ev *Event) doneLocked() (bool, error) {
	if ev.done {
		return true, nil
	}
	done, err := ev.st.dev.drv.EventDone(ev.id)
	if err != nil || !done {
		return false, deviceError(err)
	}
	return true, ev.passLocked()
}

// valid reports whether ev is an event this package made.
func (ev *Event) valid() bool { return ev != nil && ev.st != nil }

// errNilEvent is what the methods of a nil or zero *Event return.
var errNilEvent = prefixed.Kind("gpu", ErrScopeClosed, "nil or zero Event")

// errEventEnded is what an Event's methods return once it was released or
// its stream ended.
var errEventEnded = prefixed.Kind("gpu", ErrScopeClosed, "the event was released or ended with its stream")

// Done reports whether the work before the event has completed.
func (ev *Event) Done() (bool, error) {
	if !ev.valid() {
		return false, errNilEvent
	}
	var done bool
	err := ev.life.use(errEventEnded, func() error {
		if ev.done {
			done = true
			return ev.streamLive()
		}
		var err error
		done, err = ev.doneLocked()
		return err
	})
	return done && err == nil, err
}

// Wait waits until the work before the event has completed.
func (ev *Event) Wait() error {
	if !ev.valid() {
		return errNilEvent
	}
	return ev.life.use(errEventEnded, func() error {
		if ev.done {
			return ev.streamLive()
		}
		if err := ev.st.dev.drv.WaitEvent(ev.id); err != nil {
			return deviceError(err)
		}
		return ev.passLocked()
	})
}

// streamLive returns errEventEnded once the stream has ended: a done event
// answers only while its scope is open.
func (ev *Event) streamLive() error {
	if ev.st.life.ended() {
		return errEventEnded
	}
	return nil
}

// passLocked destroys the driver event of an event seen done and takes it
// from its scope. Called with ev.life.mu held.
func (ev *Event) passLocked() error {
	if ev.done || !ev.owned.Disown() {
		return nil // the scope is ending it, or Release is: end destroys it
	}
	ev.done = true
	return deviceError(ev.st.dev.destroyEvent(ev.id)) // kept where it fails
}

// Release destroys the event now rather than with its stream's scope, where
// it is not done; its methods fail with ErrScopeClosed after. Release is
// idempotent, and never needed: an event gives its driver event back once
// it is seen done.
func (ev *Event) Release() error {
	if !ev.valid() {
		return errNilEvent
	}
	ev.owned.Disown() // else the scope is ending it, and end runs once
	return deviceError(ev.end())
}

// end destroys the event, once, unless it was seen done: Release, or its
// scope as it ends.
func (ev *Event) end() error {
	return ev.life.end(func() error {
		if ev.done {
			return nil
		}
		return ev.st.dev.destroyEvent(ev.id)
	})
}
