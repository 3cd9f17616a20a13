package pool

import (
	"sync"

	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// Region sub-allocates one fixed range of memory, already obtained, with the
// pool's best-fit, splitting and coalescing. Scopes use it for reservations.
// It is safe for concurrent use.
type Region struct {
	mu     sync.Mutex // protects the fields below
	a      arena
	live   map[uintptr]*block
	used   int64
	base   uintptr
	size   int64
	closed bool // released by its owner: allocates nothing more
}

// NewRegion returns a Region over [ptr, ptr+size).
func NewRegion(ptr uintptr, size int64) (*Region, error) {
	if size < minBlock || size > MaxSize {
		return nil, prefixed.Kind("pool", ErrInvalidSize, "region of %d bytes", size)
	}
	r := &Region{live: map[uintptr]*block{}, base: ptr, size: size}
	r.a.key.small = true // split any remainder of minBlock or more
	r.a.maxSplit = unlimitedSplit
	r.a.guard = &r.mu
	r.a.addSegment(ptr, size)
	return r, nil
}

// Alloc takes size bytes from the region and returns their address and the
// bytes it set aside (size rounded up). ok is false where no free range is
// large enough.
func (r *Region) Alloc(size int64) (ptr uintptr, rounded int64, ok bool) {
	if size <= 0 || size > r.size {
		return 0, 0, false
	}
	n := roundSize(size)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, 0, false
	}
	b := r.a.take(n)
	if b == nil {
		return 0, 0, false
	}
	r.live[b.ptr] = b
	r.used += b.size
	return b.ptr, b.size, true
}

// Free returns the range at ptr to the region.
func (r *Region) Free(ptr uintptr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.live[ptr]
	if !ok {
		return prefixed.Kind("pool", ErrInvalidBlock, "%#x is not a live allocation of this region", ptr)
	}
	delete(r.live, ptr)
	r.used -= b.size
	r.a.release(b)
	return nil
}

// CloseIfEmpty closes the region if nothing is allocated from it, and
// reports whether this call closed it: true exactly once, for the caller
// that may now release the memory under it. A closed region allocates
// nothing.
func (r *Region) CloseIfEmpty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.used != 0 {
		return false
	}
	r.closed = true
	return true
}
