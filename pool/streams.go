package pool

import (
	"context"
	"errors"
	"sync"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/eventwait"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// streams is the pool's bookkeeping of streams: the blocks freed while
// other streams still use them, held until those streams' work completes,
// and the streams retired. Its fields are guarded by mu, the pool's lock,
// which guards arenas too: a block whose wait is over goes back to its
// arena under the same lock.
type streams struct {
	mu      *sync.Mutex
	events  EventSource // nil where the source has no events
	arenas  *arenaSet
	pending []*block         // freed blocks waiting for events on other streams
	retired map[uintptr]bool // streams RetireStream took out of use
	// undestroyed are events the source failed to destroy: still the
	// pool's, destroyed by the next EmptyCache or Close (waitPending).
	undestroyed []uintptr
}

// destroy destroys ev; where the source fails, the pool keeps ev for the
// next EmptyCache or Close to destroy, and returns the error.
func (s *streams) destroy(ev uintptr) error {
	err := s.events.DestroyEvent(ev)
	if err != nil {
		s.mu.Lock()
		s.undestroyed = append(s.undestroyed, ev)
		s.mu.Unlock()
	}
	return err
}

// destroyLeft destroys the events the source failed to destroy before;
// those it fails on again stay.
func (s *streams) destroyLeft() error {
	s.mu.Lock()
	left := s.undestroyed
	s.undestroyed = nil
	s.mu.Unlock()
	var errs []error
	for _, ev := range left {
		if err := s.destroy(ev); err != nil {
			errs = append(errs, prefixed.Wrap("pool", err, "destroying an event"))
		}
	}
	return errors.Join(errs...)
}

// retire marks stream retired: idle for good.
func (s *streams) retire(stream uintptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retired == nil {
		s.retired = map[uintptr]bool{}
	}
	s.retired[stream] = true
}

// isRetired reports whether stream was retired (see RetireStream).
func (s *streams) isRetired(stream uintptr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retired[stream]
}

// freeAfterEvents records an event on every other stream that used blk and
// holds it until they complete. Where an event cannot be recorded, the
// block stays held until one can, and has completed: the error says so.
func (s *streams) freeAfterEvents(blk *block) error {
	s.mu.Lock()
	uses := append([]uintptr(nil), blk.uses...)
	s.mu.Unlock()
	events, unrecorded, err := s.recordOn(nil, uses)
	s.mu.Lock()
	blk.state = statePending
	blk.events, blk.unrecorded = events, unrecorded
	s.pending = append(s.pending, blk)
	s.mu.Unlock()
	if err != nil {
		return prefixed.Wrap("pool", err, "the block at %#x is held until an event can be recorded", blk.ptr)
	}
	return nil
}

// recordOn records an event on each stream, appending it to events, and
// returns the streams it could not record one on, with the first error.
// A retired stream needs none, nor one the source says is gone (which it
// retires).
func (s *streams) recordOn(events, list []uintptr) (_, failed []uintptr, err error) {
	for _, id := range list {
		if s.isRetired(id) {
			continue // its work has completed, and it records no more
		}
		ev, rerr := s.events.RecordEvent(id)
		switch {
		case rerr == nil:
			events = append(events, ev)
		case errdefs.IsStreamGone(rerr):
			s.retire(id)
		default:
			failed = append(failed, id)
			if err == nil {
				err = prefixed.Wrap("pool", rerr, "recording an event on stream %#x", id)
			}
		}
	}
	return events, failed, err
}

// collectPending returns held blocks whose events have all completed to
// their arenas. It queries events; it never waits.
func (s *streams) collectPending() error {
	s.mu.Lock()
	if len(s.pending) == 0 {
		s.mu.Unlock()
		return nil
	}
	held := s.pending
	s.pending = nil
	s.mu.Unlock()
	var errs []error
	var done, waiting []*block
	for _, b := range held {
		ok, err := s.poll(b)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			done = append(done, b)
		} else {
			waiting = append(waiting, b)
		}
	}
	s.mu.Lock()
	s.pending = append(s.pending, waiting...)
	for _, b := range done {
		s.arenas.release(b)
	}
	s.mu.Unlock()
	return errors.Join(errs...)
}

// poll reports whether every stream that used the held block b has
// completed the work queued at its free, and then destroys b's events.
// It records first the events that the free could not.
func (s *streams) poll(b *block) (bool, error) {
	var errs []error
	if len(b.unrecorded) > 0 {
		// Its free could not record these: try again. The error was
		// the free's; the block stays held meanwhile.
		b.events, b.unrecorded, _ = s.recordOn(b.events, b.unrecorded)
	}
	if len(b.unrecorded) > 0 {
		return false, nil
	}
	for _, ev := range b.events {
		fin, err := s.events.EventDone(ev)
		if err != nil {
			return false, prefixed.Wrap("pool", err, "querying an event")
		}
		if !fin {
			return false, nil
		}
	}
	for _, ev := range b.events {
		if err := s.destroy(ev); err != nil {
			errs = append(errs, prefixed.Wrap("pool", err, "destroying an event"))
		}
	}
	return true, errors.Join(errs...)
}

// recordUse notes that stream, besides blk's own, uses blk.
func (s *streams) recordUse(blk *block, stream uintptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range blk.uses {
		if id == stream {
			return
		}
	}
	blk.uses = append(blk.uses, stream)
}

// usersOf lists the streams that used blk, its own (own) first.
func (s *streams) usersOf(blk *block, own uintptr) []uintptr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uintptr{own}, blk.uses...)
}

// anyRetired reports whether a stream was retired.
func (s *streams) anyRetired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.retired) > 0
}

// wait waits, where the source has events, until the work queued on
// each stream so far has completed, so that memory freed on it can be
// unmapped or returned. It returns the streams it could not wait for, and
// why: among them those still busy when ctx is done. Called only off the
// hot path.
func (s *streams) wait(ctx context.Context, list []uintptr) (failed map[uintptr]bool, err error) {
	if s.events == nil {
		return nil, nil
	}
	var errs []error
	for _, id := range list {
		if s.isRetired(id) {
			continue
		}
		ev, err := s.events.RecordEvent(id)
		if errdefs.IsStreamGone(err) {
			s.retire(id) // destroyed without RetireStream: its work is done
			continue
		}
		if err == nil {
			err = s.waitEvent(ctx, ev)
			if derr := s.destroy(ev); derr != nil {
				// Waited for all the same: the pool keeps the event.
				errs = append(errs, prefixed.Wrap("pool", derr, "destroying an event"))
			}
		}
		if err != nil {
			if failed == nil {
				failed = map[uintptr]bool{}
			}
			failed[id] = true
			errs = append(errs, prefixed.Wrap("pool", err, "waiting for stream %#x", id))
		}
	}
	return failed, errors.Join(errs...)
}

// streamsOf lists the streams the segments and blocks belong to, once each.
func streamsOf(segs []*segment, blocks []*block) []uintptr {
	seen := map[uintptr]bool{}
	var out []uintptr
	add := func(stream uintptr) {
		if !seen[stream] {
			seen[stream] = true
			out = append(out, stream)
		}
	}
	for _, seg := range segs {
		add(seg.key.stream)
	}
	for _, b := range blocks {
		add(b.seg.key.stream)
	}
	return out
}

// waitPending waits until the events of every held block have completed
// and returns the blocks to their arenas. With a ctx that can be done it
// polls, and stops with ctx's error when ctx is done; the blocks whose
// events completed are returned all the same. Close, EmptyCache and an
// allocation out of memory use it.
func (s *streams) waitPending(ctx context.Context) error {
	if s.events == nil {
		return nil
	}
	errs := []error{s.destroyLeft()}
	if err := s.collectPending(); err != nil { // which records what frees could not
		errs = append(errs, err)
	}
	s.mu.Lock()
	var events []uintptr
	for _, b := range s.pending {
		events = append(events, b.events...)
		for _, s := range b.unrecorded {
			errs = append(errs, prefixed.Errorf("pool", "a freed block at %#x is held: no event can be recorded on stream %#x", b.ptr, s))
		}
	}
	s.mu.Unlock()
	for _, ev := range events {
		if err := s.waitEvent(ctx, ev); err != nil {
			if ctx.Err() != nil {
				errs = append(errs, err)
				break
			}
			errs = append(errs, prefixed.Wrap("pool", err, "waiting for an event"))
		}
	}
	return errors.Join(append(errs, s.collectPending())...)
}

// waitEvent waits for ev: with the source's blocking wait where ctx can never
// be done, else by querying it until it has completed or ctx is done.
func (s *streams) waitEvent(ctx context.Context, ev uintptr) error {
	return eventwait.Wait(ctx, s.events, ev)
}
