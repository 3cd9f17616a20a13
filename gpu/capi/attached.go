package capi

import (
	"errors"
	"sync"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// attached is the scope of an Allocator, as its C functions find it by the
// id in its context: what the library holds of it, by address, and the
// Streams its scope made for the library's stream handles.
type attached struct {
	scope   *gpu.Scope
	mu      sync.Mutex          // protects live
	live    map[uintptr]liveBuf // the library's allocations not yet freed
	streams sync.Map            // a library's stream handle to its *gpu.Stream, which scope owns
}

// liveBuf is an allocation of a library's and the library's stream it was
// allocated for (0: the default stream).
type liveBuf struct {
	buf    gpu.Buffer
	stream uintptr
}

// attachedScopes maps an Allocator's id to its attached scope. Once the
// scope has ended the id names nothing: the entry is dropped, with what the
// library held, which the scope's end freed, when attach next sweeps.
var attachedScopes struct {
	mu      sync.RWMutex // protects the fields below
	byID    map[int64]*attached
	last    int64 // the last id given: an id is never given twice
	sweepAt int   // attach sweeps when byID has this many entries
}

// minSweep is the fewest entries attach lets byID have before it sweeps:
// a program that hands a library a scope per request keeps a bounded set.
const minSweep = 1024

// errNoScope is what a call through an Allocator whose scope has ended
// fails with.
var errNoScope = prefixed.Kind("gpu", gpu.ErrScopeClosed, "the allocator's scope has ended")

// attach registers s for a new Allocator and returns its id.
func attach(s *gpu.Scope) (int64, error) {
	if s.Device() == nil {
		return 0, prefixed.Kind("gpu", gpu.ErrScopeClosed, "nil or zero Scope")
	}
	as := &attachedScopes
	as.mu.Lock()
	defer as.mu.Unlock()
	if len(as.byID) >= as.sweepAt {
		for id, a := range as.byID {
			if a.scope.Context().Err() != nil {
				delete(as.byID, id)
			}
		}
		as.sweepAt = max(minSweep, 2*len(as.byID))
	}
	if as.byID == nil {
		as.byID = map[int64]*attached{}
	}
	as.last++
	as.byID[as.last] = &attached{scope: s, live: map[uintptr]liveBuf{}}
	return as.last, nil
}

// lookup returns the attached scope of id, or an error where its scope has
// ended.
func lookup(id int64) (*attached, error) {
	attachedScopes.mu.RLock()
	a := attachedScopes.byID[id]
	attachedScopes.mu.RUnlock()
	if a == nil || a.scope.Context().Err() != nil {
		return nil, errNoScope
	}
	return a, nil
}

// alloc allocates size bytes in a's scope, for work on the library's
// stream of handle stream.
func (a *attached) alloc(size int64, stream uintptr) (uintptr, error) {
	buf, err := a.scope.Alloc(size)
	if err != nil {
		return 0, err
	}
	// The scope's memory is on its own stream; work on stream uses it (the
	// default stream too, where the scope is on another), so the pool
	// reuses it elsewhere only once that work is done.
	if err := a.recordUse(buf, stream); err != nil {
		return 0, errors.Join(err, a.scope.Free(buf))
	}
	ptr := buf.Ptr()
	a.mu.Lock()
	a.live[ptr] = liveBuf{buf, stream}
	a.mu.Unlock()
	return ptr, nil
}

// free frees the allocation at ptr, for work on the library's stream of
// handle stream, after checking its size where the library gives one
// (size >= 0). A ptr of 0 is no allocation: freeing it does nothing, as
// C's free(NULL).
func (a *attached) free(ptr uintptr, size int64, stream uintptr) error {
	if ptr == 0 {
		return nil
	}
	a.mu.Lock()
	e, ok := a.live[ptr]
	switch {
	case !ok:
		a.mu.Unlock()
		return prefixed.Kind("gpu", gpu.ErrFreed, "%#x is not a live allocation of this allocator (never allocated by it, or freed already)", ptr)
	case size >= 0 && size != e.buf.Size():
		a.mu.Unlock()
		return prefixed.Kind("gpu", gpu.ErrInvalidSize, "%#x was allocated with %d bytes, freed with %d: not freed", ptr, e.buf.Size(), size)
	}
	if stream != e.stream {
		// Freed for work on another stream than its allocation's: that
		// stream uses it too, and the pool reuses it only once its work
		// queued before the free has completed.
		if err := a.recordUse(e.buf, stream); err != nil {
			a.mu.Unlock()
			return prefixed.Wrap("gpu", err, "freeing %#x for stream %#x, which it was not allocated for: not freed", ptr, stream)
		}
	}
	delete(a.live, ptr)
	a.mu.Unlock()
	if err := a.scope.Free(e.buf); err != nil {
		return prefixed.Wrap("gpu", err, "freeing %#x", ptr)
	}
	return nil
}

// recordUse tells the pool that work on the library's stream of handle h
// uses buf. The Stream for h is made once, by the scope, which never
// destroys it.
func (a *attached) recordUse(buf gpu.Buffer, h uintptr) error {
	v, ok := a.streams.Load(h)
	if !ok {
		st, err := a.scope.UseStream(h)
		if err != nil {
			return err
		}
		v, _ = a.streams.LoadOrStore(h, st) // one that lost a race stays the scope's, unused
	}
	return buf.RecordUse(v.(*gpu.Stream))
}
