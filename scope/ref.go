package scope

import (
	"runtime"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// Ref names one allocation: a slot, the generation of its use and its
// address. It is a small comparable value; the zero Ref names nothing.
// Once the allocation ends, every use of the Ref fails, also after its
// slot serves another allocation: the generations differ.
type Ref struct {
	slot *slot
	gen  uint64
	ptr  uintptr // the allocation's address, which its use never changes (Ptr reads it here, not from the slot)
}

// The errors a stale Ref fails with: made once, since a use of a stale
// handle must not allocate.
var (
	errRefFreed = prefixed.Kind("scope", errdefs.Freed, "the buffer was freed (Scope.Free); its handle is stale")
	errRefEnded = prefixed.Kind("scope", errdefs.ScopeClosed,
		"the buffer's scope has ended (Scope.Keep hands a buffer to the parent scope, to outlive its own)")
	errRefAsleep = prefixed.Kind("scope", errdefs.Asleep,
		"the buffer's scope is asleep: no memory is mapped under it until the scope wakes")
)

// WithPtr calls fn with the device address off bytes into the allocation
// (a view's address) and the stream the allocation's owner orders its work
// on, holding the allocation live until fn returns: it cannot be released
// meanwhile. Once the allocation has ended it returns gpu.ErrFreed or gpu.ErrScopeClosed
// without calling fn; otherwise it returns what fn returns. The caller
// keeps off within the allocation.
func (r Ref) WithPtr(off uintptr, fn func(ptr, stream uintptr) error) error {
	if err := r.acquire(); err != nil {
		return err
	}
	defer r.slot.leave()
	if r.slot.touches.Load() {
		// After fn: the use it records ends after the work fn queued
		// (Scope.TryEvict asks about that work).
		defer r.slot.touch()
	}
	return fn(r.slot.ptr+off, r.slot.stream.Load())
}

// Ptr returns the allocation's device address while it is live, and 0
// once it has ended: WithPtr's check, without holding the allocation, for
// a caller that only wants the address (which outlives the check). It is
// one atomic load where the allocation is neither held by as many callers
// as the word counts nor being evicted; then it waits as WithPtr does.
func (r Ref) Ptr() uintptr {
	if r.slot == nil {
		return 0
	}
	w := r.slot.word.Load()
	if w&usersMask == usersMask {
		// Full, or claimed by an eviction: wait for it, as WithPtr does.
		var ptr uintptr
		_ = r.WithPtr(0, func(p, _ uintptr) error { ptr = p; return nil })
		return ptr
	}
	if r.check(w) != nil {
		return 0
	}
	if r.slot.touches.Load() {
		r.slot.touch() // a use, as WithPtr's (Scope.LastUse)
	}
	return r.ptr
}

// RecordUse tells the pool that work on stream uses the allocation, so
// that its memory is not reused before that work has completed.
func (r Ref) RecordUse(stream uintptr) error {
	if err := r.acquire(); err != nil {
		return err
	}
	defer r.slot.leave()
	if stream == r.slot.stream.Load() {
		return nil
	}
	if r.slot.region != nil {
		// A reservation reuses its memory in its own stream's order and
		// knows no other: a use elsewhere could see the memory reused
		// under it.
		return prefixed.Errorf("scope", "memory of a reservation is used on its own stream only")
	}
	if r.slot.touches.Load() {
		// Its owner, evictable, is busy while work on stream is queued:
		// note the stream, then the use (see Scope.TryEvict).
		if o := r.slot.owner.Load(); o != nil {
			o.noteStream(stream)
		}
		defer r.slot.touch()
	}
	if f := r.slot.tree.recordingUse; f != nil {
		f() // a test's (Tree.recordingUse)
	}
	p := r.slot.tree.pool
	if d := r.slot.dom; d != nil {
		// Its domain's Sleep waits for the work queued on stream too.
		d.noteStream(stream)
		p = d.pool
	}
	return p.RecordUse(r.slot.block, stream)
}

// acquire holds the allocation live for the caller, until slot.leave, if
// r is live.
func (r Ref) acquire() error {
	if r.slot == nil {
		return errRefFreed
	}
	for {
		w := r.slot.word.Load()
		if err := r.check(w); err != nil {
			return err
		}
		if w&usersMask == usersMask {
			runtime.Gosched() // as many holders as the word counts: wait for one to leave
			continue
		}
		if r.slot.word.CompareAndSwap(w, w+1) {
			return nil
		}
	}
}

// check returns why r cannot be used, given its slot's word w. The live
// allocation r names is one comparison of the word's generation and
// state, inlined where the hot path calls it (Free's detach, WithPtr);
// the reasons it is not are out of line.
func (r Ref) check(w uint64) error {
	if w>>stateShift == r.gen<<stateBits { // r's generation, and the state live, 0
		return nil
	}
	return r.whyNot(w)
}

// whyNot is check's answer for a word that is not r's live allocation's.
//
//go:noinline
func (r Ref) whyNot(w uint64) error {
	if genOf(w) != r.gen {
		return errRefFreed // the slot serves another allocation now
	}
	if s := stateOf(w); s == evicted {
		return r.slot.tree.evicted
	}
	return stateErr(stateOf(w))
}

func (r Ref) err() error {
	if r.slot == nil {
		return errRefFreed
	}
	return r.check(r.slot.word.Load())
}

func stateErr(state uint64) error {
	switch state {
	case freed:
		return errRefFreed
	case released:
		return errRefEnded
	case asleep:
		return errRefAsleep
	}
	return nil
}
