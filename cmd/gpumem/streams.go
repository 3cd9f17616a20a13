package main

import (
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/pool"
)

// streamMaker is a source that makes its own streams: a GPU's driver knows
// only the streams it made.
type streamMaker interface {
	NewStream() (uintptr, error)
	DestroyStream(stream uintptr) error
}

// streamTable gives each stream a trace names a stream of the replay's
// source. The simulated source takes any number as a stream, so there a
// trace's stream is used as it is; over a driver that makes its own, the
// replay makes one for each stream the trace names (0 stays the default
// stream) before the events that use it are timed, and ends them after the
// last pass.
type streamTable struct {
	maker streamMaker // nil: a trace's stream numbers are the source's
	ids   map[uint64]uintptr
}

func newStreamTable(src pool.Source) *streamTable {
	t := &streamTable{ids: map[uint64]uintptr{}}
	t.maker, _ = src.(streamMaker)
	return t
}

// prepare makes a stream for each stream of evs that has none yet.
func (t *streamTable) prepare(evs []event) error {
	if t.maker == nil {
		return nil
	}
	for _, ev := range evs {
		if _, ok := t.ids[ev.Stream]; ok || ev.Stream == 0 {
			continue
		}
		s, err := t.maker.NewStream()
		if err != nil {
			return fmt.Errorf("trace line %d: making a stream for the trace's stream %d: %w", ev.Line, ev.Stream, err)
		}
		t.ids[ev.Stream] = s
	}
	return nil
}

// of returns the source's stream for a trace's stream.
func (t *streamTable) of(id uint64) uintptr {
	if t.maker == nil || id == 0 {
		return uintptr(id)
	}
	return t.ids[id]
}

// close retires every stream the table made in p and destroys it.
func (t *streamTable) close(p *pool.Pool) error {
	var errs []error
	for id, s := range t.ids {
		errs = append(errs, p.RetireStream(s), t.maker.DestroyStream(s))
		delete(t.ids, id)
	}
	return errors.Join(errs...)
}
