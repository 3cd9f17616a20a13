package gpu

import (
	"fmt"

	"github.com/gpuscope/gpuscope/scope"
)

// Buffer is device memory owned by a scope. Its methods fail with
// ErrScopeClosed once its scope has ended and ErrFreed once it was freed;
// they never touch released memory. Copies use the default stream and
// return when done.
type Buffer struct {
	a   *scope.Allocation // points to own, below
	dev *Device
	own scope.Allocation
}

// Size returns the bytes allocated; 0 for a nil Buffer.
func (b *Buffer) Size() int64 {
	if b == nil {
		return 0
	}
	return b.a.Size()
}

// Ptr returns the device address, for kernels and drivers; 0 for a nil
// Buffer. It stays valid only while the buffer is live: launch kernels
// inside [Buffer.Use].
func (b *Buffer) Ptr() uintptr {
	if b == nil {
		return 0
	}
	return b.a.Ptr()
}

// Device returns the buffer's device.
func (b *Buffer) Device() *Device { return b.dev }

// Use calls fn with the device address while the buffer is live; the
// buffer cannot be released until fn returns. Use it to launch kernels.
func (b *Buffer) Use(fn func(ptr uintptr) error) error {
	if b == nil {
		return fmt.Errorf("%w: nil Buffer", ErrWrongScope)
	}
	return deviceError(b.a.Use(fn))
}

// CopyFromHost copies src to the start of the buffer.
func (b *Buffer) CopyFromHost(src []byte) error {
	return b.Use(func(ptr uintptr) error {
		if int64(len(src)) > b.Size() {
			return fmt.Errorf("gpu: CopyFromHost: %d bytes into a %d-byte buffer", len(src), b.Size())
		}
		return b.dev.drv.CopyHtoD(ptr, src, 0)
	})
}

// CopyToHost copies the start of the buffer into dst.
func (b *Buffer) CopyToHost(dst []byte) error {
	return b.Use(func(ptr uintptr) error {
		if int64(len(dst)) > b.Size() {
			return fmt.Errorf("gpu: CopyToHost: %d bytes from a %d-byte buffer", len(dst), b.Size())
		}
		return b.dev.drv.CopyDtoH(dst, ptr, 0)
	})
}

// CopyFrom copies all of src, which may be on another device, to the start
// of b.
func (b *Buffer) CopyFrom(src *Buffer) error {
	if src == nil {
		return fmt.Errorf("%w: nil source Buffer", ErrWrongScope)
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
func (b *Buffer) Memset(v byte) error {
	return b.Use(func(ptr uintptr) error { return b.dev.drv.Memset(ptr, v, b.Size(), 0) })
}
