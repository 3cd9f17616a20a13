package gpu

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/prefixed"
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
// and it has no open child: a scope in use is never evicted, and an
// allocation never evicts its own scope. Work queued on a stream that is
// still to run is safe: the memory goes back in the stream's order, as at
// any scope's end.
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
		o.evictable, o.priority = true, priority
		return o
	})
}

// evictState is what an evictable scope holds beyond a Scope's.
type evictState struct {
	priority int
	cancel   context.CancelCauseFunc // cancels the context the scope opened with
	cause    atomic.Pointer[error]   // set when it is evicted
}

// evictor is a device's list of evictable scopes. It lives beside the
// scopes rather than in them: a Scope that is not evictable stays as
// small as it was.
type evictor struct {
	has       atomic.Bool // some evictable scope was opened: ends and failed allocations look here
	evictions atomic.Int64
	bytes     atomic.Int64

	mu     sync.Mutex // protects scopes; held while a victim is chosen and evicted
	scopes map[*Scope]*evictState
}

// add lists s, an evictable scope that opened with state ev, and forgets
// the scopes that ended without eviction or Close (their parent's end,
// say).
func (e *evictor) add(s *Scope, ev *evictState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.scopes == nil {
		e.scopes = map[*Scope]*evictState{}
	}
	for x, st := range e.scopes {
		if x.s.Closed() && st.cause.Load() == nil {
			delete(e.scopes, x)
		}
	}
	e.scopes[s] = ev
	e.has.Store(true)
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

// ended forgets s, which its owner ended (WithScope's end, Close), and
// releases the context made for it; it returns s's state.
func (e *evictor) ended(s *Scope) *evictState {
	if !e.has.Load() {
		return nil
	}
	e.mu.Lock()
	ev := e.scopes[s]
	delete(e.scopes, s)
	e.mu.Unlock()
	if ev != nil {
		ev.cancel(nil)
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

// evictOne evicts the idle evictable scope first in line, other than
// self, for an allocation of size bytes, and reports whether it evicted
// one. The scopes' locks are only tried, never waited for: an allocating
// goroutine that holds a scope busy skips it.
func (e *evictor) evictOne(d *Device, self *Scope, size int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	type candidate struct {
		s       *Scope
		ev      *evictState
		lastUse uint64
	}
	cands := make([]candidate, 0, len(e.scopes))
	for s, ev := range e.scopes {
		if s != self && !s.s.Closed() {
			cands = append(cands, candidate{s, ev, s.s.Stats().LastUse})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.ev.priority, b.ev.priority), cmp.Compare(a.lastUse, b.lastUse))
	})
	for _, c := range cands {
		ev := c.ev
		bytes, ok, err := c.s.s.TryEvict(func(path string) {
			cause := prefixed.Kind(ErrEvicted, "%q, to make room for %s", path, Bytes(size))
			ev.cause.Store(&cause)
			ev.cancel(cause)
		})
		if !ok {
			continue
		}
		if err != nil {
			d.dropped(prefixed.Wrap("gpu", err, "evicting a scope"))
		}
		e.evictions.Add(1)
		e.bytes.Add(bytes)
		return true
	}
	return false
}

// evictFor makes room for the allocation of size bytes in s that failed
// with err for want of memory, evicting idle evictable scopes one at a
// time and retrying after each. It returns the last attempt's result, or
// err where nothing could be evicted. A scope Limit's refusal is not the
// device's want of memory: eviction would not help.
func evictFor(s *Scope, size int64, err error) (scope.Ref, error) {
	var limit *scope.LimitError
	if errors.As(err, &limit) {
		return scope.Ref{}, err
	}
	for s.dev.evict.evictOne(s.dev, s, size) {
		ref, err2 := s.s.Alloc(size)
		if err2 == nil || !isOutOfMemory(err2) {
			return ref, err2
		}
		err = err2
	}
	return scope.Ref{}, err
}

// evictedErr returns the error of an evicted scope, or nil where s was
// not evicted.
func (s *Scope) evictedErr() error {
	if !s.valid() {
		return nil
	}
	return s.dev.evict.state(s).err()
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
