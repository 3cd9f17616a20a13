package scope

import (
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/pool"
)

// Allocation states.
const (
	live     int32 = iota
	freed          // by Scope.Free
	released       // by the end of its scope
)

// Allocation is memory owned by a scope.
type Allocation struct {
	use   sync.RWMutex // read-held while the memory is used; write-held to release it
	state atomic.Int32
	owner atomic.Pointer[Scope]

	ptr    uintptr
	size   int64
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
	a.use.RLock()
	defer a.use.RUnlock()
	if err := a.err(); err != nil {
		return err
	}
	return fn(a.ptr)
}

func (a *Allocation) err() error {
	switch a.state.Load() {
	case freed:
		return ErrFreed
	case released:
		return ErrClosed
	}
	return nil
}

// release returns the memory, once no Use is running. It reports whether
// this call released it (the state was live).
func (a *Allocation) release(to int32, p *pool.Pool) (bool, error) {
	if !a.state.CompareAndSwap(live, to) {
		return false, nil
	}
	a.use.Lock()
	defer a.use.Unlock()
	if a.region != nil {
		return true, a.region.Free(a.ptr)
	}
	return true, p.Free(a.block)
}
