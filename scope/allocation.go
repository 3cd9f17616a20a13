package scope

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gpuscope/gpuscope/pool"
)

// Allocation states, kept in the top bits of Allocation.st; the bits below
// count the Use calls running.
const (
	live     int64 = iota
	freed          // by Scope.Free
	released       // by the end of its scope

	stateShift = 48
	usersMask  = 1<<stateShift - 1
)

// Allocation is memory owned by a scope. The zero value is ready for
// [Scope.AllocInto].
type Allocation struct {
	st    atomic.Int64 // state<<stateShift | running Use calls
	owner atomic.Pointer[Scope]

	ptr    uintptr
	size   int64
	taken  int64        // size rounded as the pool rounds it: what the scopes were charged
	block  pool.Block   // when from the pool
	region *pool.Region // when from a reservation
	resOf  *Scope       // the scope whose reservation holds it
	stack  []uintptr

	prev, next *Allocation // in the owner's list, guarded by the owner's mu
}

// Ptr returns the device address.
func (a *Allocation) Ptr() uintptr { return a.ptr }

// Size returns the bytes asked for.
func (a *Allocation) Size() int64 { return a.size }

// Stack returns the program counters of where it was allocated, when
// stacks were being recorded; nil otherwise.
func (a *Allocation) Stack() []uintptr { return a.stack }

// Owner returns the scope that owns it now.
func (a *Allocation) Owner() *Scope { return a.owner.Load() }

// Use calls fn with the device address while the allocation is live; the
// allocation cannot be released until fn returns. It fails with ErrClosed or
// ErrFreed once it is gone.
func (a *Allocation) Use(fn func(ptr uintptr) error) error {
	for {
		v := a.st.Load()
		if v>>stateShift != live {
			return stateErr(v >> stateShift)
		}
		if a.st.CompareAndSwap(v, v+1) {
			break
		}
	}
	defer a.st.Add(-1)
	return fn(a.ptr)
}

func (a *Allocation) err() error { return stateErr(a.st.Load() >> stateShift) }

func stateErr(state int64) error {
	switch state {
	case freed:
		return ErrFreed
	case released:
		return ErrClosed
	}
	return nil
}

// mark moves the allocation from live to state to, keeping the count of
// running Use calls, and reports whether it was live.
func (a *Allocation) mark(to int64) bool {
	for {
		v := a.st.Load()
		if v>>stateShift != live {
			return false
		}
		if a.st.CompareAndSwap(v, to<<stateShift|v&usersMask) {
			return true
		}
	}
}

// releaseMemory returns the memory of a marked allocation. No new Use can
// start; it waits for those running, which the contract says finish before
// the scope ends (a copy, a kernel launch).
func (a *Allocation) releaseMemory(t *Tree) error {
	for wait := time.Microsecond; a.st.Load()&usersMask != 0; wait = min(2*wait, time.Millisecond) {
		runtime.Gosched()
		time.Sleep(wait)
	}
	var scrubbed error
	if t.scrub != nil {
		scrubbed = t.scrub(a.ptr, a.size)
	}
	var err error
	if a.region != nil {
		// The last release from a closed scope's reservation returns it.
		err = errors.Join(scrubbed, a.region.Free(a.ptr), a.resOf.releaseReservationIfEmpty())
	} else {
		err = errors.Join(scrubbed, t.pool.Free(a.block))
	}
	if t.onFree != nil {
		t.onFree()
	}
	return err
}
