package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
)

// waitQueue is the device's line of allocations waiting for memory (scopes
// opened with [WaitForMemory]), first come first served, as
// golang.org/x/sync/semaphore serves its waiters.
type waitQueue struct {
	frees   atomic.Uint64 // releases while active > 0: an attempt that saw n and fails may wait only while it is still n
	active  atomic.Int32  // allocations in allocWaiting: releases count only while there are some
	waiting atomic.Int32  // len(q), read without the lock on every release

	mu sync.Mutex // protects q
	q  []chan struct{}
}

// released tells the first waiter, if any, that memory went back, or that
// room grew some other way (the pool's cap, a Limit's holders). With no
// allocation waiting or about to, it is one load: an allocation that
// becomes active after the load sees the memory this release gave back.
func (w *waitQueue) released() {
	if w.active.Load() == 0 {
		return
	}
	w.frees.Add(1)
	if w.waiting.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeFirst()
}

// wakeFirst hands the turn to the first waiter. Called with w.mu held.
func (w *waitQueue) wakeFirst() {
	if len(w.q) == 0 {
		return
	}
	ch := w.q[0]
	w.q = slices.Delete(w.q, 0, 1)
	w.waiting.Add(-1)
	ch <- struct{}{}
}

// passOn wakes the next waiter: memory may be left for it too.
func (w *waitQueue) passOn() {
	if w.waiting.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeFirst()
}

// wait blocks until memory is released after the attempt that saw seen
// releases, or ctx is done, or, with a pause > 0, the pause is over (the
// waiter then tries again with no release: something no release
// announces may have made room, such as a busy evictable scope turning
// idle). A waiter that already had its turn and failed again waits at the
// front, keeping its place.
func (w *waitQueue) wait(ctx context.Context, seen uint64, front bool, pause time.Duration) error {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.frees.Load() != seen {
		w.mu.Unlock()
		return nil // memory went back since the attempt: try again at once
	}
	if front {
		w.q = slices.Insert(w.q, 0, ch)
	} else {
		w.q = append(w.q, ch)
	}
	w.waiting.Add(1)
	w.mu.Unlock()
	var tick <-chan time.Time
	if pause > 0 {
		t := time.NewTimer(pause)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-ch:
		return nil
	case <-tick:
		w.leave(ch, false) // it tries again now: a turn it was handed is its own
		return nil
	case <-ctx.Done():
		w.leave(ch, true)
		return context.Cause(ctx)
	}
}

// leave takes ch out of the line; where it had been handed the turn
// already, pass hands the turn on.
func (w *waitQueue) leave(ch chan struct{}, pass bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i := slices.Index(w.q, ch); i >= 0 {
		w.q = slices.Delete(w.q, i, i+1)
		w.waiting.Add(-1)
	} else if pass {
		w.wakeFirst() // it had the turn: hand it on
	}
}

// The pauses of a waiter that an evictable scope may make room for
// without releasing memory (it is busy now): short at first, doubling up
// to maxEvictPause, as the pool's waits for events are.
const (
	firstEvictPause = 50 * time.Microsecond
	maxEvictPause   = 10 * time.Millisecond
)

// allocWaiting is Alloc for a scope whose allocations wait for memory: on
// running out of it (the device's, or a limit's), it waits for a release on
// the device and tries again, until the scope's context is done. A request
// that can never fit (larger than the device, the pool's cap, or a limit
// of the scope or an enclosing one) fails at once, with its out-of-memory
// error: no release could make room for it. Besides releases, raising or
// removing the pool's cap, EmptyCache, and a Keep that moves memory out
// of a limited scope wake it; while an evictable scope that it could
// evict is open but busy, it also tries again now and then, since such a
// scope turns idle without a release.
func allocWaiting(s *Scope, size int64) (Buffer, error) {
	q := &s.dev.waiters
	q.active.Add(1) // before the first attempt, so that no release goes uncounted after it
	defer q.active.Add(-1)
	front := false
	pause := time.Duration(0)
	// Stats.OOMs counts the allocation, not its attempts: none where a
	// wait served it, one where it failed after running out of memory.
	counted := int64(0) // the pool's out-of-memory counts of its attempts
	absorb := &s.dev.evict.absorbed
	for {
		seen := q.frees.Load()
		b, left, err := s.allocOnce(size)
		if err == nil {
			q.passOn()
			absorb.Add(counted)
			return b, nil
		}
		counted += left
		if !isOutOfMemory(err) || neverFits(err, size) {
			absorb.Add(max(0, counted-1))
			return Buffer{}, err
		}
		if s.dev.evict.couldEvictFor(s) {
			pause = min(max(2*pause, firstEvictPause), maxEvictPause)
		} else {
			pause = 0
		}
		if werr := q.wait(s.s.Context(), seen, front, pause); werr != nil {
			absorb.Add(max(0, counted-1))
			return Buffer{}, &waitError{scope: s.s.Path(), size: size, ctx: werr, oom: err}
		}
		front = true
	}
}

// neverFits reports whether the out-of-memory error err says that size
// bytes cannot fit however much memory is released: they exceed the
// limit that refused them, the pool's cap, or the device.
func neverFits(err error, size int64) bool {
	var oom *OOMError
	return errors.As(err, &oom) && oom.beyond(size) != ""
}

// waitError is the error of an allocation of a [WaitForMemory] scope whose
// context ended while it waited for memory. It is ErrOutOfMemory (its last
// attempt's *OOMError, for errors.As) and the context's error.
type waitError struct {
	scope string
	size  int64
	ctx   error // the context's cause
	oom   error // the last attempt's out-of-memory error
}

func (e *waitError) Error() string { return "gpu: " + e.text() }

// text is the message without the prefix.
func (e *waitError) text() string {
	return fmt.Sprintf("out of memory: scope %q gave up waiting for %s: %s",
		e.scope, units.FormatBytes(e.size), prefixed.Text(e.ctx))
}

// Text is the message without the prefix, for a layer above that wraps it.
func (e *waitError) Text() string { return e.text() }

func (e *waitError) Unwrap() []error { return []error{e.ctx, e.oom} }
