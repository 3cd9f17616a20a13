package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// RecordUse tells the pool that work on stream, besides b's own stream, uses
// b (PyTorch's record_stream). When b is freed the pool records an event on
// each such stream and reuses b only after they have completed.
func (p *Pool) RecordUse(b Block, stream uintptr) error {
	blk := b.blk
	notLive := fmt.Errorf("%w: RecordUse on a block that is not live", ErrInvalidBlock)
	if blk == nil || blk.seg.arena.pool != p {
		return notLive
	}
	sh := p.lockOwner(blk)
	if sh == nil {
		return notLive
	}
	live := blk.live == b.gen
	sh.mu.Unlock()
	if !live {
		return notLive
	}
	if stream == b.stream {
		return nil
	}
	if p.isRetired(stream) {
		return fmt.Errorf("pool: RecordUse on stream %#x, which was retired", stream)
	}
	if p.events == nil {
		return errors.New("pool: RecordUse: the source has no streams or events")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range blk.uses {
		if s == stream {
			return nil
		}
	}
	blk.uses = append(blk.uses, stream)
	return nil
}

// WaitForUses waits until the work queued so far has completed on b's own
// stream and on every other stream that used it ([Pool.RecordUse]), but
// for except: the stream the caller queues its next work on, after that
// work in order. A device that zeroes freed memory calls it before the
// zeros, so that they land after every write of the block's owner.
func (p *Pool) WaitForUses(b Block, except uintptr) error {
	blk := b.blk
	if blk == nil || blk.seg.arena.pool != p {
		return fmt.Errorf("%w: WaitForUses on a block of another pool, or none", ErrInvalidBlock)
	}
	p.mu.Lock()
	streams := append([]uintptr{b.stream}, blk.uses...)
	p.mu.Unlock()
	streams = slices.DeleteFunc(streams, func(s uintptr) bool { return s == except })
	_, err := p.waitStreams(context.Background(), streams)
	return err
}

// IsStreamGone reports whether err is an EventSource's way of saying a
// stream does not exist (destroyed without [Pool.RetireStream], the
// "deleted stream" case): an error with a method StreamGone that returns
// true. The pool then takes the stream as retired, its work done, so that
// EmptyCache and Close still give its memory back: destroy a stream only
// once its work has completed.
func IsStreamGone(err error) bool {
	var g interface{ StreamGone() bool }
	return errors.As(err, &g) && g.StreamGone()
}

// RetireStream tells the pool that stream is about to be destroyed: it
// waits until the work queued on it so far has completed, and from then on
// treats the stream as idle, recording and waiting for no event on it, so
// that EmptyCache and Close keep working once the source no longer knows
// the stream. The memory the pool caches for it is released (what is still
// allocated on it goes back to its arena when freed, and is released by
// the next EmptyCache). Call it after the last work on the stream is
// queued and before the stream is destroyed.
func (p *Pool) RetireStream(stream uintptr) error {
	if stream == 0 {
		return errors.New("pool: RetireStream: the default stream is never retired")
	}
	if p.events == nil {
		return nil
	}
	if _, err := p.waitStreams(context.Background(), []uintptr{stream}); err != nil {
		return err
	}
	p.retire(stream)
	return p.EmptyCache()
}

// releaseRetiredLocked gives back the address space of retired streams'
// arenas that hold nothing, and drops those arenas: a stream per request
// must not leave a reservation per request behind. Called with growMu
// held, by EmptyCache (RetireStream's among them).
func (p *Pool) releaseRetiredLocked() error {
	p.mu.Lock()
	none := len(p.retired) == 0
	p.mu.Unlock()
	if none {
		return nil
	}
	return p.releaseAddressSpaceLocked(true)
}

// retire marks stream retired: idle for good.
func (p *Pool) retire(stream uintptr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retired == nil {
		p.retired = map[uintptr]bool{}
	}
	p.retired[stream] = true
}

// isRetired reports whether stream was retired (see RetireStream).
func (p *Pool) isRetired(stream uintptr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.retired[stream]
}

// freeAfterEvents records an event on every other stream that used blk and
// parks it until they complete. Where an event cannot be recorded, the
// block stays parked until one can, and has completed: the error says so.
func (p *Pool) freeAfterEvents(blk *block) error {
	p.mu.Lock()
	uses := append([]uintptr(nil), blk.uses...)
	p.mu.Unlock()
	events, unrecorded, err := p.recordOn(nil, uses)
	p.mu.Lock()
	blk.state = statePending
	blk.events, blk.unrecorded = events, unrecorded
	p.pending = append(p.pending, blk)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("pool: the block at %#x is held until an event can be recorded: %w", blk.ptr, err)
	}
	return nil
}

// recordOn records an event on each stream, appending it to events, and
// returns the streams it could not record one on, with the first error.
// A retired stream needs none, nor one the source says is gone (which it
// retires).
func (p *Pool) recordOn(events, streams []uintptr) (_, failed []uintptr, err error) {
	for _, s := range streams {
		if p.isRetired(s) {
			continue // its work has completed, and it records no more
		}
		ev, rerr := p.events.RecordEvent(s)
		switch {
		case rerr == nil:
			events = append(events, ev)
		case IsStreamGone(rerr):
			p.retire(s)
		default:
			failed = append(failed, s)
			if err == nil {
				err = fmt.Errorf("pool: recording an event on stream %#x: %w", s, rerr)
			}
		}
	}
	return events, failed, err
}

// collectPending returns parked blocks whose events have all completed to
// their arenas. It queries events; it never waits.
func (p *Pool) collectPending() error {
	p.mu.Lock()
	if len(p.pending) == 0 {
		p.mu.Unlock()
		return nil
	}
	parked := p.pending
	p.pending = nil
	p.mu.Unlock()
	var errs []error
	var done, waiting []*block
	for _, b := range parked {
		if len(b.unrecorded) > 0 {
			// Its free could not record these: try again. The error was
			// the free's; the block stays parked meanwhile.
			b.events, b.unrecorded, _ = p.recordOn(b.events, b.unrecorded)
		}
		ok := len(b.unrecorded) == 0
		for _, ev := range b.events {
			if !ok {
				break
			}
			fin, err := p.events.EventDone(ev)
			if err != nil {
				errs = append(errs, fmt.Errorf("pool: querying an event: %w", err))
			}
			if !fin || err != nil {
				ok = false
				break
			}
		}
		if ok {
			for _, ev := range b.events {
				if err := p.events.DestroyEvent(ev); err != nil {
					errs = append(errs, fmt.Errorf("pool: destroying an event: %w", err))
				}
			}
			done = append(done, b)
		} else {
			waiting = append(waiting, b)
		}
	}
	p.mu.Lock()
	p.pending = append(p.pending, waiting...)
	for _, b := range done {
		b.seg.arena.release(b)
	}
	p.mu.Unlock()
	return errors.Join(errs...)
}

// waitStreams waits, where the source has events, until the work queued on
// each stream so far has completed, so that memory freed on it can be
// unmapped or returned. It returns the streams it could not wait for, and
// why: among them those still busy when ctx is done. Called only off the
// hot path.
func (p *Pool) waitStreams(ctx context.Context, streams []uintptr) (failed map[uintptr]bool, err error) {
	if p.events == nil {
		return nil, nil
	}
	var errs []error
	for _, s := range streams {
		if p.isRetired(s) {
			continue
		}
		ev, err := p.events.RecordEvent(s)
		if IsStreamGone(err) {
			p.retire(s) // destroyed without RetireStream: its work is done
			continue
		}
		if err == nil {
			err = p.waitEvent(ctx, ev)
			if derr := p.events.DestroyEvent(ev); err == nil {
				err = derr
			}
		}
		if err != nil {
			if failed == nil {
				failed = map[uintptr]bool{}
			}
			failed[s] = true
			errs = append(errs, fmt.Errorf("pool: waiting for stream %#x: %w", s, err))
		}
	}
	return failed, errors.Join(errs...)
}

// streamsOf lists the streams the segments and blocks belong to, once each.
func streamsOf(segs []*segment, blocks []*block) []uintptr {
	seen := map[uintptr]bool{}
	var out []uintptr
	add := func(s uintptr) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, s := range segs {
		add(s.arena.key.stream)
	}
	for _, b := range blocks {
		add(b.seg.arena.key.stream)
	}
	return out
}

// waitPending waits until the events of every parked block have completed
// and returns the blocks to their arenas. With a ctx that can be done it
// polls, and stops with ctx's error when ctx is done; the blocks whose
// events completed are returned all the same. Close, EmptyCache and an
// allocation out of memory use it.
func (p *Pool) waitPending(ctx context.Context) error {
	if p.events == nil {
		return nil
	}
	var errs []error
	if err := p.collectPending(); err != nil { // which records what frees could not
		errs = append(errs, err)
	}
	p.mu.Lock()
	var events []uintptr
	for _, b := range p.pending {
		events = append(events, b.events...)
		for _, s := range b.unrecorded {
			errs = append(errs, fmt.Errorf("pool: a freed block at %#x is held: no event can be recorded on stream %#x", b.ptr, s))
		}
	}
	p.mu.Unlock()
	for _, ev := range events {
		if err := p.waitEvent(ctx, ev); err != nil {
			if ctx.Err() != nil {
				errs = append(errs, err)
				break
			}
			errs = append(errs, fmt.Errorf("pool: waiting for an event: %w", err))
		}
	}
	return errors.Join(append(errs, p.collectPending())...)
}

// waitEvent waits for ev: with the source's blocking wait where ctx can never
// be done, else by querying it with a growing pause until it has completed
// or ctx is done.
func (p *Pool) waitEvent(ctx context.Context, ev uintptr) error {
	if ctx.Done() == nil {
		return p.events.WaitEvent(ev)
	}
	pause := 20 * time.Microsecond
	for {
		done, err := p.events.EventDone(ev)
		if err != nil || done {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		pause = min(2*pause, 10*time.Millisecond)
	}
}
