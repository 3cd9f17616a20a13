package gpu

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// Evictable lets the device end the scope, when it is idle, to make room
// for an allocation that would otherwise fail for want of memory (the
// device's, or the pool's cap; never a scope's Limit). The device evicts
// idle evictable scopes one at a time, lowest priority first and, among
// equals, the least recently used (an allocation, a Use, a copy), and
// retries after each, until the allocation fits.
//
// Idle means that no Use or UseHost runs on its buffers, no copy or other
// call through them is under way, no allocation, Free or Keep of it is,
// it has no open child, and the stream work queued on its buffers has
// completed: the work on its own stream, on the streams [Buffer.RecordUse]
// (or a kernel launch, a copy) named for them, and on the streams it made,
// queued before its last use. The device asks the driver's events without
// waiting. Work others queued on those streams before the device first
// asks counts too; work queued after does not. A scope in use is never
// evicted, and an allocation never evicts its own scope, nor a
// reservation the scopes it opens in.
//
// A scope opened with a [Reserve] that finds no room evicts as an
// allocation does.
//
// An evicted scope ends: its context is cancelled with a cause that
// errors.Is ErrEvicted, the scope itself and its buffers fail with such an
// error (a buffer with ErrFreed once its handle's slot serves another
// allocation, as any stale handle does), and its memory goes back to the
// pool. Its owner loads it again in
// a new scope. The option applies to this scope only, not to the scopes
// opened inside it.
func Evictable(priority int) ScopeOption {
	return scopeOptionFunc(func(o scopeOptions) scopeOptions {
		o.once(givenEvictable, "Evictable")
		o.evictable, o.priority = true, priority
		return o
	})
}

// evictState is what an evictable scope holds beyond a Scope's.
type evictState struct {
	priority int
	cancel   context.CancelCauseFunc // cancels the context the scope opened with
	cause    atomic.Pointer[error]   // set when it is evicted
	owned    []uintptr               // the streams it made (Scope.NewStream), guarded by the evictor's mu
	mark     atomic.Pointer[streamMark]
	over     atomic.Bool // it ended: the mark's events are destroyed, and no mark is kept
}

// streamMark is what the latest check of whether an evictable scope's
// stream work has completed found: events recorded after the work queued
// on its streams before its use numbered lastUse, those still pending.
// While the scope is not used again, the next check asks these events
// rather than record new ones, so that work queued on the streams later,
// by others, does not keep the scope busy.
type streamMark struct {
	lastUse uint64
	streams []uintptr
	pending []uintptr // events not yet seen complete
}

// evictor is a device's list of evictable scopes. It lives beside the
// scopes rather than in them: a Scope that is not evictable stays as
// small as it was.
type evictor struct {
	has       atomic.Bool // some evictable scope was opened: ends and failed allocations look here
	evictions atomic.Int64
	bytes     atomic.Int64
	// served counts the allocations (and reservations) that eviction made
	// room for; absorbed, the pool's out-of-memory counts they left behind
	// (their failed attempts, and all but one of a request that failed
	// after evicting), and those of a WaitForMemory allocation's attempts
	// before its last, which Stats.OOMs leaves out: an allocation that
	// eviction or a wait served did not run out of memory.
	served, absorbed atomic.Int64

	mu     sync.Mutex // protects scopes and their states' owned streams
	scopes map[*Scope]*evictState
}

// add lists s, an evictable scope that opened with state ev, and forgets
// the scopes that ended without eviction or Close (their parent's end,
// say).
func (e *evictor) add(s *Scope, ev *evictState) {
	e.mu.Lock()
	if e.scopes == nil {
		e.scopes = map[*Scope]*evictState{}
	}
	var gone []*evictState
	for x, st := range e.scopes {
		if x.s.Closed() && st.cause.Load() == nil {
			delete(e.scopes, x)
			gone = append(gone, st)
		}
	}
	e.scopes[s] = ev
	e.has.Store(true)
	e.mu.Unlock()
	for _, st := range gone {
		st.forget(s.dev) // the events of a check that found it busy
	}
}

// state returns the state of s, nil where s is not a listed evictable
// scope.
func (e *evictor) state(s *Scope) *evictState {
	if !e.has.Load() {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.scopes[s]
}

// ownStream notes that the evictable scope s made the stream id: work on
// it keeps s busy, since ending s waits for that work.
func (e *evictor) ownStream(s *Scope, id uintptr) {
	if !e.has.Load() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ev := e.scopes[s]; ev != nil {
		ev.owned = append(ev.owned, id)
	}
}

// ended forgets s, which its owner ended (WithScope's end, Close), and
// releases the context made for it; it returns s's state.
func (e *evictor) ended(d *Device, s *Scope) *evictState {
	if !e.has.Load() {
		return nil
	}
	e.mu.Lock()
	ev := e.scopes[s]
	delete(e.scopes, s)
	e.mu.Unlock()
	if ev != nil {
		ev.cancel(nil)
		ev.forget(d)
	}
	return ev
}

// priority returns the priority of the evictable scope s; 0 where it is
// not listed.
func (e *evictor) priority(s scope.Scope) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	for x, ev := range e.scopes {
		if x.s == s {
			return ev.priority
		}
	}
	return 0
}

// couldEvictFor reports whether an evictable scope that an allocation in
// s could evict is open: not s, nor one s opened in (it is busy while s is
// open). One busy now may turn idle without releasing memory, which no
// release announces: a waiting allocation asks again now and then.
func (e *evictor) couldEvictFor(s *Scope) bool {
	if !e.has.Load() {
		return false
	}
	ctx := s.s.Context()
	e.mu.Lock()
	defer e.mu.Unlock()
	for x, ev := range e.scopes {
		if x != s && !x.s.Closed() && !openedIn(ctx, ev) {
			return true
		}
	}
	return false
}

// candidate is an evictable scope that may be evicted, as evictOne found
// it.
type candidate struct {
	s       *Scope
	ev      *evictState
	owned   []uintptr
	lastUse uint64
}

// candidates lists the evictable scopes that may be evicted, as far as
// their state tells without asking the driver, skipping those skip names,
// first in line first: lowest priority, then least recently used. A scope
// whose lock is held is left out: it is busy.
func (e *evictor) candidates(skip func(*Scope, *evictState) bool) []candidate {
	e.mu.Lock()
	cands := make([]candidate, 0, len(e.scopes))
	for s, ev := range e.scopes {
		if !s.s.Closed() && !skip(s, ev) {
			cands = append(cands, candidate{s: s, ev: ev, owned: slices.Clone(ev.owned)})
		}
	}
	e.mu.Unlock()
	// Their recency, without waiting for a scope's lock: an idle that
	// declines gives it.
	kept := cands[:0]
	for _, c := range cands {
		seen := false
		c.s.s.TryEvict(func(lastUse uint64, _ []uintptr) bool {
			c.lastUse, seen = lastUse, true
			return false
		}, nil)
		if seen {
			kept = append(kept, c)
		}
	}
	slices.SortFunc(kept, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.ev.priority, b.ev.priority), cmp.Compare(a.lastUse, b.lastUse))
	})
	return kept
}

// evictOne evicts the idle evictable scope first in line, other than
// those skip names, for an allocation of size bytes, and reports whether
// it evicted one. The scopes' locks are only tried, never waited for: an
// allocating goroutine that holds a scope busy skips it. The driver is
// asked whether their stream work has completed with no lock held.
func (e *evictor) evictOne(d *Device, skip func(*Scope, *evictState) bool, size int64) bool {
	for _, c := range e.candidates(skip) {
		ev := c.ev
		idle := func(lastUse uint64, streams []uintptr) bool {
			return ev.streamsDone(d, lastUse, append(streams, c.owned...))
		}
		bytes, ok, err := c.s.s.TryEvict(idle, func(path string) {
			cause := prefixed.Kind("gpu", ErrEvicted, "%q, to make room for %s", path, Bytes(size))
			ev.cause.Store(&cause)
			ev.cancel(cause)
		})
		if !ok {
			continue
		}
		ev.forget(d)
		if err != nil {
			d.dropped(prefixed.Wrap("gpu", err, "evicting a scope"))
		}
		e.evictions.Add(1)
		e.bytes.Add(bytes)
		return true
	}
	return false
}

// streamsDone reports whether the work queued on streams before the
// scope's use numbered lastUse has completed, without waiting: it records
// an event on each stream, or asks those it recorded for the same use.
// An event it cannot record or ask about leaves the scope busy, but for a
// stream that is gone: its work is over.
func (ev *evictState) streamsDone(d *Device, lastUse uint64, streams []uintptr) bool {
	m := ev.mark.Swap(nil)
	if m != nil && (m.lastUse != lastUse || !slices.Equal(m.streams, streams)) {
		d.destroyEvents(m.pending)
		m = nil
	}
	if m == nil {
		m = &streamMark{lastUse: lastUse, streams: streams}
		for _, id := range streams {
			e, err := d.drv.RecordEvent(id)
			if err != nil && !errdefs.IsStreamGone(err) {
				d.destroyEvents(m.pending)
				return false
			}
			if err == nil {
				m.pending = append(m.pending, e)
			}
		}
	}
	var pending []uintptr
	for _, e := range m.pending {
		if done, err := d.drv.EventDone(e); err != nil || !done {
			pending = append(pending, e)
			continue
		}
		d.destroyEvents([]uintptr{e})
	}
	m.pending = pending
	if !ev.mark.CompareAndSwap(nil, m) {
		d.destroyEvents(m.pending) // another check kept its own
	} else if ev.over.Load() {
		ev.forget(d) // it ended meanwhile: nobody else would destroy them
	}
	return len(pending) == 0
}

// forget destroys the events of the scope's mark, once it has ended.
func (ev *evictState) forget(d *Device) {
	ev.over.Store(true)
	if m := ev.mark.Swap(nil); m != nil {
		d.destroyEvents(m.pending)
	}
}

// destroyEvents destroys events the evictor recorded; an error is one
// nobody else hears.
func (d *Device) destroyEvents(events []uintptr) {
	for _, e := range events {
		if err := d.destroyEvent(e); err != nil {
			d.dropped(prefixed.Wrap("gpu", err, "destroying an event of an eviction check"))
		}
	}
}

// evictFor makes room for the allocation of size bytes in s that failed
// with err for want of memory, evicting idle evictable scopes one at a
// time and retrying after each. It returns the last attempt's result, or
// err where nothing could be evicted. A scope Limit's refusal is not the
// device's want of memory: eviction would not help.
func evictFor(s *Scope, size int64, err error) (scope.Ref, int64, error) {
	if !evictionHelps(err, size) {
		return scope.Ref{}, poolOOMs(err), err
	}
	self := func(x *Scope, _ *evictState) bool { return x == s }
	e := &s.dev.evict
	failed := poolOOMs(err)
	for e.evictOne(s.dev, self, size) {
		ref, err2 := s.s.Alloc(size)
		if err2 == nil || !isOutOfMemory(err2) {
			return ref, e.settle(failed, err2 == nil), err2
		}
		err = err2
		failed += poolOOMs(err2)
	}
	return scope.Ref{}, e.settle(failed, false), err
}

// poolOOMs returns 1 where the pool counted err as one of its
// out-of-memory errors (Stats.OOMs), else 0.
func poolOOMs(err error) int64 {
	var oom *pool.OOMError
	if errors.As(err, &oom) {
		return 1
	}
	return 0
}

// settle counts what became of a request that evicted scopes after the
// pool counted failed of its attempts out of memory: served by the room
// eviction made, it ran out of memory none of those times; failing all
// the same, once. It returns the counts it left: 0 or 1.
func (e *evictor) settle(failed int64, served bool) (left int64) {
	if served {
		e.served.Add(1)
	} else if failed > 0 {
		failed-- // the request's own out-of-memory, which stays counted
		left = 1
	}
	if failed > 0 {
		e.absorbed.Add(failed)
	}
	return left
}

// reserveEvicting opens the scope of options so, whose reservation found
// no room with err, after evicting idle evictable scopes one at a time,
// as evictFor does for an allocation; never the scopes it opens in, which
// it is as much a part of as an allocation in them.
func reserveEvicting(ctx context.Context, d *Device, so scope.Options, err error) (scope.Scope, error) {
	if !d.evict.has.Load() || !evictionHelps(err, so.Reserve) {
		return scope.Scope{}, err
	}
	within := func(_ *Scope, ev *evictState) bool { return openedIn(ctx, ev) }
	failed := poolOOMs(err)
	for d.evict.evictOne(d, within, so.Reserve) {
		h, err2 := d.tree.Open(ctx, scope.Scope{}, so)
		if err2 == nil || !isOutOfMemory(err2) {
			d.evict.settle(failed, err2 == nil)
			return h, err2
		}
		err = err2
		failed += poolOOMs(err2)
	}
	d.evict.settle(failed, false)
	return scope.Scope{}, err
}

// evictionHelps reports whether evicting scopes could make room for the
// size bytes that err refused for want of memory: not where a scope's
// Limit refused them, nor where they exceed the pool's cap or the device.
func evictionHelps(err error, size int64) bool {
	var limit *scope.LimitError
	if !isOutOfMemory(err) || errors.As(err, &limit) {
		return false
	}
	var oom *pool.OOMError
	return !errors.As(err, &oom) || !(oom.Limit > 0 && size > oom.Limit || oom.DeviceTotal >= 0 && size > oom.DeviceTotal)
}

// evictKey is the key of what withEvictable puts in a context.
type evictKey struct{}

// evictChain lists the evictable scopes a context is within, innermost
// first.
type evictChain struct {
	ev    *evictState
	outer *evictChain
}

// withEvictable returns ctx, within the evictable scope whose state is ev
// besides those it was within.
func withEvictable(ctx context.Context, ev *evictState) context.Context {
	outer, _ := ctx.Value(evictKey{}).(*evictChain)
	return context.WithValue(ctx, evictKey{}, &evictChain{ev: ev, outer: outer})
}

// openedIn reports whether ctx is within the evictable scope whose state
// is ev.
func openedIn(ctx context.Context, ev *evictState) bool {
	for c, _ := ctx.Value(evictKey{}).(*evictChain); c != nil; c = c.outer {
		if c.ev == ev {
			return true
		}
	}
	return false
}

// evictedErr returns the error of an evicted scope, or nil where s was
// not evicted.
func (s *Scope) evictedErr() error {
	if !s.valid() {
		return nil
	}
	return s.dev.evict.state(s).err()
}

// refused returns err, the error of a call through s, as its caller
// receives it: the eviction's cause where s was evicted and err says the
// scope has ended, so that an evicted scope refuses everything with
// ErrEvicted, as Alloc does.
func (s *Scope) refused(err error) error {
	if err != nil && errors.Is(err, ErrScopeClosed) {
		if cause := s.evictedErr(); cause != nil {
			return cause
		}
	}
	return deviceError(err)
}

// err returns the cause of the eviction of the scope whose state ev is;
// nil for a nil ev, or one not evicted.
func (ev *evictState) err() error {
	if ev == nil {
		return nil
	}
	if c := ev.cause.Load(); c != nil {
		return *c
	}
	return nil
}
