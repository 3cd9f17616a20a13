package gpu

import (
	"unsafe"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/pool"
)

// Elem are the element types of a [Slice]: fixed-size numbers, which can be
// copied to and from the device byte for byte.
type Elem interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~int | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uint | ~uintptr |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// Slice is a typed buffer of n elements of T: a value handle, as [Buffer]
// is, with the element count. The zero Slice names no memory.
type Slice[T Elem] struct {
	Buffer
	n int
}

// Alloc allocates n elements of T owned by s.
func Alloc[T Elem](s *Scope, n int) (Slice[T], error) {
	size := int64(unsafe.Sizeof(*new(T)))
	if n <= 0 || int64(n) > pool.MaxSize/size {
		return Slice[T]{}, prefixed.Kind("gpu", ErrInvalidSize, "%d elements of %d bytes", n, size)
	}
	if !s.valid() {
		return Slice[T]{}, errNilScope
	}
	b, err := s.Alloc(int64(n) * size)
	if err != nil {
		return Slice[T]{}, err
	}
	return Slice[T]{Buffer: b, n: n}, nil
}

// Len returns the number of elements; 0 for the zero Slice.
func (x Slice[T]) Len() int { return x.n }

// View returns elements i to j-1 of x, as slicing x[i:j] would: a view
// that shares x's lifetime (see [Buffer.View]).
func (x Slice[T]) View(i, j int) (Slice[T], error) {
	if x.IsZero() {
		return Slice[T]{}, prefixed.Kind("gpu", ErrWrongScope, "zero Slice")
	}
	if i < 0 || j <= i || j > x.n {
		return Slice[T]{}, prefixed.Kind("gpu", ErrInvalidSize, "view [%d:%d] of a slice of %d", i, j, x.n)
	}
	size := int64(unsafe.Sizeof(*new(T)))
	b, err := x.Buffer.View(int64(i)*size, int64(j-i)*size)
	if err != nil {
		return Slice[T]{}, err
	}
	return Slice[T]{Buffer: b, n: j - i}, nil
}

// CopyFromHost copies src to the start of x. src may be shorter than x;
// longer, it is refused with an error, and nothing is copied.
func (x Slice[T]) CopyFromHost(src []T) error {
	if err := x.fits("CopyFromHost", len(src), "into"); err != nil {
		return err
	}
	return x.Buffer.CopyFromHost(bytesOf(src))
}

// CopyToHost copies the first len(dst) elements of x into dst.
func (x Slice[T]) CopyToHost(dst []T) error {
	if err := x.fits("CopyToHost", len(dst), "from"); err != nil {
		return err
	}
	return x.Buffer.CopyToHost(bytesOf(dst))
}

// fits checks that x is a slice that n elements copied to or from host
// memory fit in, for op; dir says which way in its error: "into", "from".
func (x Slice[T]) fits(op string, n int, dir string) error {
	if x.IsZero() {
		return prefixed.Kind("gpu", ErrWrongScope, "zero Slice")
	}
	if n > x.n {
		return prefixed.Kind("gpu", ErrInvalidSize, "%s: %d elements %s a slice of %d", op, n, dir, x.n)
	}
	return nil
}

// bytesOf views s as bytes. Elem types hold no pointers, so this is safe.
func bytesOf[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// UseHost calls fn with the elements of x as a Go slice, on a device whose
// memory the program can address (the host device; a GPU's cannot, and
// fails with ErrNotSupported). The slice is valid only inside fn: x cannot
// be released while fn runs, and the memory may belong to another buffer
// after. It is how a Go library that works on slices (a tensor package)
// runs on scope-owned memory without a copy.
func (x Slice[T]) UseHost(fn func(v []T) error) error {
	if x.IsZero() {
		return prefixed.Kind("gpu", ErrWrongScope, "zero Slice")
	}
	ha, ok := x.dev.drv.(driver.HostAddressable)
	if !ok {
		return prefixed.Kind("gpu", ErrNotSupported, "device %s's memory is not the program's to address", x.dev.name)
	}
	return x.Use(func(ptr uintptr) error {
		mem, err := ha.HostBytes(ptr, x.Size())
		if err != nil {
			return err
		}
		return fn(unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(mem))), x.n))
	})
}
