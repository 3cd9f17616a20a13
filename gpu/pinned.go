package gpu

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// HostSlice is page-locked host memory of n elements of T, owned by a
// scope: freed when the scope ends, after the scope's streams. Copies
// between it and a Slice can run asynchronously on a stream
// ([Slice.CopyFromHostAsync]). Its elements are reached only inside
// [HostSlice.Use], so that no []T outlives the memory. It is a small
// comparable value; the zero HostSlice has no memory. On the host device
// it is ordinary memory.
type HostSlice[T Elem] struct {
	m *pinned
	n int
}

// pinned is one HostAlloc, shared by the handles to it.
type pinned struct {
	drv  driver.HostAllocator
	dev  *Device
	p    unsafe.Pointer
	size int64

	life lifetime // shared by Use and the queuing of copies
}

// AllocHost allocates n elements of T of page-locked host memory owned by
// s.
func AllocHost[T Elem](s *Scope, n int) (HostSlice[T], error) {
	if !s.valid() {
		return HostSlice[T]{}, errNilScope
	}
	size := int64(unsafe.Sizeof(*new(T)))
	if n <= 0 || int64(n) > math.MaxInt64/size {
		return HostSlice[T]{}, fmt.Errorf("%w: %d elements of %d bytes", ErrInvalidSize, n, size)
	}
	if err := s.s.Err(); err != nil {
		return HostSlice[T]{}, deviceError(fmt.Errorf("gpu: AllocHost: %w", err))
	}
	ha, ok := s.dev.drv.(driver.HostAllocator)
	if !ok {
		return HostSlice[T]{}, fmt.Errorf("%w: device %s has no page-locked host memory", ErrNotSupported, s.dev.name)
	}
	p, err := ha.HostAlloc(int64(n) * size)
	if err != nil {
		if pool.IsSourceOutOfMemory(err) {
			return HostSlice[T]{}, fmt.Errorf("%w: AllocHost of %s: %w", ErrOutOfMemory, units.FormatBytes(int64(n)*size), err)
		}
		return HostSlice[T]{}, deviceError(fmt.Errorf("gpu: AllocHost: %w", err))
	}
	m := &pinned{drv: ha, dev: s.dev, p: p, size: int64(n) * size}
	// Freed once the scope's memory is released: after its streams' work,
	// whenever they were made.
	if _, err := s.s.OwnResource(scope.Resource{Kind: "page-locked memory", Bytes: m.size, Final: m.end}); err != nil {
		return HostSlice[T]{}, deviceError(errors.Join(err, m.end()))
	}
	return HostSlice[T]{m: m, n: n}, nil
}

func (m *pinned) end() error {
	return m.life.end(func() error { return m.drv.HostFree(m.p) })
}

// errPinnedEnded is what a HostSlice's methods return once it was freed.
var errPinnedEnded = fmt.Errorf("%w: the host memory was freed with its scope", ErrScopeClosed)

// Len returns the number of elements; 0 for the zero HostSlice.
func (h HostSlice[T]) Len() int { return h.n }

// IsZero reports whether h is the zero HostSlice.
func (h HostSlice[T]) IsZero() bool { return h.m == nil }

// Use calls fn with the elements while the memory is live; the slice must
// not be kept after fn returns. Do not write to it while an asynchronous
// copy from it may still be queued, nor read what one to it has not yet
// written: synchronize the stream first.
func (h HostSlice[T]) Use(fn func(v []T) error) error {
	return h.hold(func(p unsafe.Pointer) error { return fn(unsafe.Slice((*T)(p), h.n)) })
}

// hold calls fn with the address of the memory while it is live.
func (h HostSlice[T]) hold(fn func(p unsafe.Pointer) error) error {
	if h.m == nil {
		return fmt.Errorf("%w: zero HostSlice", ErrWrongScope)
	}
	return h.m.life.share(errPinnedEnded, func() error { return fn(h.m.p) })
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
		return fmt.Errorf("%w: zero Slice", ErrWrongScope)
	}
	if h.m == nil || h.m.dev != x.dev || st == nil || st.dev != x.dev {
		return fmt.Errorf("%w: an asynchronous copy needs host memory and a stream of the slice's device", ErrWrongScope)
	}
	if h.n > x.n {
		return fmt.Errorf("gpu: asynchronous copy of %d elements with a slice of %d", h.n, x.n)
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
				if toDevice {
					return h.m.drv.CopyHtoDAsync(ptr, p, n, st.id)
				}
				return h.m.drv.CopyDtoHAsync(p, ptr, n, st.id)
			})
		})
	})
}
