package gpu

import (
	"errors"
	"sync"

	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// leftovers are the driver's events and streams that a release failed to
// destroy. They stay the device's, as a segment the driver will not take
// back stays the pool's: EmptyCache and Close try again, so that a driver
// call that failed once loses nothing.
type leftovers struct {
	mu      sync.Mutex // protects the fields below
	events  []uintptr
	streams []uintptr
}

// destroyEvent destroys the driver event ev; where the driver fails, the
// device keeps ev for the next EmptyCache or Close, and the error says so.
func (d *Device) destroyEvent(ev uintptr) error {
	return d.left.keep(&d.left.events, ev, d.drv.DestroyEvent(ev))
}

// destroyStream destroys the driver stream id, kept as destroyEvent keeps
// an event where the driver fails.
func (d *Device) destroyStream(id uintptr) error {
	return d.left.keep(&d.left.streams, id, d.drv.DestroyStream(id))
}

// keep adds id to list, one of l's, where err says the driver failed to
// destroy it, and returns err.
func (l *leftovers) keep(list *[]uintptr, id uintptr, err error) error {
	if err != nil {
		l.mu.Lock()
		*list = append(*list, id)
		l.mu.Unlock()
	}
	return err
}

// retry destroys the leftovers once more; those the driver fails on again
// stay.
func (l *leftovers) retry(d *Device) error {
	l.mu.Lock()
	events, streams := l.events, l.streams
	l.events, l.streams = nil, nil
	l.mu.Unlock()
	var errs []error
	for _, ev := range events {
		if err := d.destroyEvent(ev); err != nil {
			errs = append(errs, prefixed.Wrap("gpu", err, "destroying an event a release left"))
		}
	}
	for _, id := range streams {
		if err := d.destroyStream(id); err != nil {
			errs = append(errs, prefixed.Wrap("gpu", err, "destroying a stream a scope's end left"))
		}
	}
	return errors.Join(errs...)
}
