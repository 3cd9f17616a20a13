package gpu

import (
	"errors"
	"math"
	"unsafe"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/scope"
)

// HostSlice is page-locked host memory of n elements of T, owned by a
// scope: freed when the scope ends, after the scope's streams, or by
// [HostSlice.Free]. Freed memory goes back to the device's cache of
// page-locked memory, where a later AllocHost reuses it once the stream
// work queued on it has completed ([Stats] counts it). Copies between it
// and a Slice can run asynchronously on a stream
// ([Slice.CopyFromHostAsync]). Its elements are reached only inside
// [HostSlice.Use], so that no []T outlives the memory. It is a small
// comparable value; the zero HostSlice has no memory. On the host device
// it is ordinary memory.
type HostSlice[T Elem] struct {
	b     *hostBlock
	gen   uint64      // the block's generation while h holds it
	owned scope.Owned // its record in the scope, for Free
	n     int
}

// AllocHost allocates n elements of T of page-locked host memory owned by
// s.
func AllocHost[T Elem](s *Scope, n int) (HostSlice[T], error) {
	if !s.valid() {
		return HostSlice[T]{}, errNilScope
	}
	size := int64(unsafe.Sizeof(*new(T)))
	if n <= 0 || int64(n) > math.MaxInt64/size {
		return HostSlice[T]{}, prefixed.Kind("gpu", ErrInvalidSize, "%d elements of %d bytes", n, size)
	}
	if s.dev.host.drv == nil {
		return HostSlice[T]{}, prefixed.Kind("gpu", ErrNotSupported, "device %s has no page-locked host memory", s.dev.name)
	}
	if err := s.dev.injected("AllocHost", int64(n)*size); err != nil {
		return HostSlice[T]{}, prefixed.KindWrap("gpu", ErrOutOfMemory, err, "AllocHost of %s", Bytes(int64(n)*size))
	}
	b, err := s.dev.host.get(int64(n) * size)
	if err != nil {
		if errdefs.IsSourceOutOfMemory(err) {
			return HostSlice[T]{}, prefixed.KindWrap("gpu", ErrOutOfMemory, err, "AllocHost of %s", Bytes(int64(n)*size))
		}
		return HostSlice[T]{}, deviceError(prefixed.Wrap("gpu", err, "AllocHost"))
	}
	gen := b.gen.Load() // no HostSlice has it yet: the last one's end moved gen on
	b.held = gen
	owned, err := s.ownBlock(b)
	if err != nil {
		return HostSlice[T]{}, s.refused(errors.Join(prefixed.Wrap("gpu", err, "AllocHost"), b.end()))
	}
	return HostSlice[T]{b: b, gen: gen, owned: owned, n: n}, nil
}

// ownBlock makes s own b, given back once the scope's memory is released,
// after its streams' work, whenever they were made; or by Free. Where s
// freed b last and its record waits, dormant, on s's list, s takes that
// record back without its lock (scope.Owned.Reown).
func (s *Scope) ownBlock(b *hostBlock) (scope.Owned, error) {
	if o, ok := b.last.Reown(s.s); ok {
		return o, nil
	}
	return s.s.OwnResource(scope.Resource{Kind: "page-locked memory", Bytes: b.size, Final: b.final, Allocation: true})
}

// errPinnedEnded is what a HostSlice's methods return once it was freed.
var errPinnedEnded = prefixed.Kind("gpu", ErrScopeClosed, "the host memory was freed, or its scope ended")

// Free gives the memory back before its scope ends, to the device's cache,
// which reuses it once the copies queued on it have completed. Use and
// copies through h or its copies fail with ErrScopeClosed after. Free is
// idempotent.
func (h HostSlice[T]) Free() error {
	if h.b == nil {
		return prefixed.Kind("gpu", ErrWrongScope, "zero HostSlice")
	}
	b := h.b
	if !b.gen.CompareAndSwap(h.gen, h.gen+1) {
		return nil // freed, or its scope ended it
	}
	b.quiesce() // h's uses end now
	if h.owned.Disown() {
		b.last = h.owned // for the scope's next AllocHost of b: Reown
		return deviceError(b.giveBack())
	}
	return nil // the scope is ending it, and gives the block back
}

// Len returns the number of elements; 0 for the zero HostSlice.
func (h HostSlice[T]) Len() int { return h.n }

// IsZero reports whether h is the zero HostSlice.
func (h HostSlice[T]) IsZero() bool { return h.b == nil }

// Use calls fn with the elements while the memory is live; the slice must
// not be kept after fn returns. Do not write to it while an asynchronous
// copy from it may still be queued, nor read what one to it has not yet
// written: synchronize the stream first.
func (h HostSlice[T]) Use(fn func(v []T) error) error {
	return h.hold(func(p unsafe.Pointer) error { return fn(unsafe.Slice((*T)(p), h.n)) })
}

// hold calls fn with the address of the memory while it is live.
func (h HostSlice[T]) hold(fn func(p unsafe.Pointer) error) error {
	if h.b == nil {
		return prefixed.Kind("gpu", ErrWrongScope, "zero HostSlice")
	}
	defer h.b.leave()
	if !h.b.enter(h.gen) {
		return errPinnedEnded
	}
	return fn(h.b.p)
}

// CopyFromHostAsync queues a copy of h, at most Len elements, to the start
// of x on st and returns at once. h must be page-locked memory from
// AllocHost: that is what lets the copy run while the caller goes on.
func (x Slice[T]) CopyFromHostAsync(h HostSlice[T], st *Stream) error {
	return x.copyAsync(h, st, true)
}

// CopyToHostAsync queues a copy of the first h.Len() elements of x into h
// on st and returns at once; h holds them once st has passed the copy
// (st.Synchronize).
func (x Slice[T]) CopyToHostAsync(h HostSlice[T], st *Stream) error {
	return x.copyAsync(h, st, false)
}

func (x Slice[T]) copyAsync(h HostSlice[T], st *Stream, toDevice bool) error {
	if x.IsZero() {
		return prefixed.Kind("gpu", ErrWrongScope, "zero Slice")
	}
	if h.b == nil || h.b.cache.dev != x.dev || st == nil || st.dev != x.dev {
		return prefixed.Kind("gpu", ErrWrongScope, "an asynchronous copy needs host memory and a stream of the slice's device")
	}
	if h.n > x.n {
		return prefixed.Errorf("gpu", "asynchronous copy of %d elements with a slice of %d", h.n, x.n)
	}
	n := int64(h.n) * int64(unsafe.Sizeof(*new(T)))
	return st.life.use(errStreamEnded, func() error {
		return h.hold(func(p unsafe.Pointer) error {
			return x.useOn(func(ptr, own uintptr) error {
				if own != st.id {
					if err := x.ref.RecordUse(st.id); err != nil {
						return err
					}
				}
				h.b.usedOn(st.id)
				drv := h.b.cache.drv
				if toDevice {
					return drv.CopyHtoDAsync(ptr, p, n, st.id)
				}
				return drv.CopyDtoHAsync(p, ptr, n, st.id)
			})
		})
	})
}
