package gpu

import (
	"fmt"

	"github.com/gpuscope/gpuscope/scope"
)

// Buffer is device memory owned by a scope: a small value, a handle like
// netip.Addr, that names one allocation. Copies of it name the same
// allocation; it is comparable, and the zero Buffer names none. Its methods
// fail with ErrScopeClosed once its scope has ended and ErrFreed once it
// was freed; they never touch released memory, also when the memory (and
// the slot that named it) serve another allocation since. Copies use the
// default stream and return when done.
type Buffer struct {
	dev *Device
	ref scope.Ref
}

// IsZero reports whether b is the zero Buffer.
func (b Buffer) IsZero() bool { return b.dev == nil }

// Size returns the bytes allocated; 0 for the zero Buffer. It stays what
// it was after the buffer ends.
func (b Buffer) Size() int64 { return b.ref.Size() }

// Ptr returns the device address, for kernels and drivers, while the
// buffer is live; 0 for the zero Buffer or one that ended. An address
// outlives the check: launch kernels inside [Buffer.Use].
func (b Buffer) Ptr() uintptr { return b.ref.Ptr() }

// Device returns the buffer's device; nil for the zero Buffer.
func (b Buffer) Device() *Device { return b.dev }

// Key returns the key by which snapshots name the buffer.
func (b Buffer) Key() BufferKey { return BufferKey{b.ref} }

// errZeroBuffer is what the methods of the zero Buffer return.
var errZeroBuffer = fmt.Errorf("%w: zero Buffer", ErrWrongScope)

// Use calls fn with the device address while the buffer is live; the
// buffer cannot be released until fn returns. Use it to launch kernels.
func (b Buffer) Use(fn func(ptr uintptr) error) error {
	if b.IsZero() {
		return errZeroBuffer
	}
	return deviceError(b.ref.Use(fn))
}

// CopyFromHost copies src to the start of the buffer.
func (b Buffer) CopyFromHost(src []byte) error {
	return b.Use(func(ptr uintptr) error {
		if int64(len(src)) > b.Size() {
			return fmt.Errorf("gpu: CopyFromHost: %d bytes into a %d-byte buffer", len(src), b.Size())
		}
		return b.dev.drv.CopyHtoD(ptr, src, 0)
	})
}

// CopyToHost copies the start of the buffer into dst.
func (b Buffer) CopyToHost(dst []byte) error {
	return b.Use(func(ptr uintptr) error {
		if int64(len(dst)) > b.Size() {
			return fmt.Errorf("gpu: CopyToHost: %d bytes from a %d-byte buffer", len(dst), b.Size())
		}
		return b.dev.drv.CopyDtoH(dst, ptr, 0)
	})
}

// CopyFrom copies all of src, which may be on another device, to the start
// of b.
func (b Buffer) CopyFrom(src Buffer) error {
	if src.IsZero() {
		return fmt.Errorf("%w: zero source Buffer", ErrWrongScope)
	}
	return b.Use(func(dst uintptr) error {
		n := src.Size()
		if n > b.Size() {
			return fmt.Errorf("gpu: CopyFrom: %d bytes into a %d-byte buffer", n, b.Size())
		}
		return src.Use(func(from uintptr) error {
			if src.dev == b.dev {
				return b.dev.drv.CopyDtoD(dst, from, n, 0)
			}
			// Between devices, through host memory.
			tmp := make([]byte, n)
			if err := src.dev.drv.CopyDtoH(tmp, from, 0); err != nil {
				return err
			}
			return b.dev.drv.CopyHtoD(dst, tmp, 0)
		})
	})
}

// Memset sets every byte of the buffer to v.
func (b Buffer) Memset(v byte) error {
	return b.Use(func(ptr uintptr) error { return b.dev.drv.Memset(ptr, v, b.Size(), 0) })
}
