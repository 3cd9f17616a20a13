package gpu

import (
	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/scope"
)

// Buffer is device memory owned by a scope: a small value, a handle like
// netip.Addr, that names one allocation, or a view of part of one. Copies
// of it name the same memory; it is comparable, and the zero Buffer names
// none. Its methods fail with ErrScopeClosed once its scope has ended and
// ErrFreed once it was freed; they never touch released memory, also when
// the memory (and the slot that named it) serve another allocation since.
// Copies use the default stream and return when done.
type Buffer struct {
	dev  *Device
	ref  scope.Ref
	view int64 // for a view, 1 + where it begins in the allocation; 0 otherwise
	size int64
}

// off returns where b begins in its allocation.
func (b Buffer) off() int64 { return max(b.view-1, 0) }

// IsZero reports whether b is the zero Buffer.
func (b Buffer) IsZero() bool { return b.dev == nil }

// Size returns the bytes of the buffer (of the view, for a view); 0 for
// the zero Buffer. It stays what it was after the buffer ends.
func (b Buffer) Size() int64 { return b.size }

// Ptr returns the device address, for kernels and drivers, while the
// buffer is live; 0 for the zero Buffer or one that ended. An address
// outlives the check: launch kernels inside [Buffer.Use].
func (b Buffer) Ptr() uintptr {
	if p := b.ref.Ptr(); p != 0 {
		return p + uintptr(b.off())
	}
	return 0 // the zero Buffer, or one that ended
}

// Device returns the buffer's device; nil for the zero Buffer.
func (b Buffer) Device() *Device { return b.dev }

// IsView reports whether b is a view of part of an allocation, from
// [Buffer.View]. A view covering all of a buffer is the buffer itself.
func (b Buffer) IsView() bool { return b.view != 0 }

// View returns the size bytes of b that begin off bytes in. A view shares
// its allocation's lifetime: it fails as the buffer does once that ends,
// and cannot be freed or kept itself.
func (b Buffer) View(off, size int64) (Buffer, error) {
	if b.IsZero() {
		return Buffer{}, errZeroBuffer
	}
	if off < 0 || size <= 0 || off > b.size || size > b.size-off {
		return Buffer{}, prefixed.Kind("gpu", ErrInvalidSize, "view of %d bytes at %d in a %d-byte buffer", size, off, b.size)
	}
	if err := b.Use(func(uintptr) error { return nil }); err != nil {
		return Buffer{}, err
	}
	if b.view == 0 && off == 0 && size == b.size {
		return b, nil
	}
	v := b
	v.view, v.size = b.off()+off+1, size
	return v, nil
}

// errZeroBuffer is what the methods of the zero Buffer return.
var errZeroBuffer error = zeroBufferError{}

// zeroBufferError is the error of a use of the zero Buffer. It says what
// the zero Buffer is, which no sentinel's text does; errors.Is finds
// ErrWrongScope, since no scope owns it.
type zeroBufferError struct{}

func (zeroBufferError) Error() string { return "gpu: " + zeroBufferError{}.Text() }

// Text is the message without the prefix (prefixed.Texter).
func (zeroBufferError) Text() string {
	return "the zero Buffer names no memory: no allocation returned it (a failed one returns it with its error)"
}

func (zeroBufferError) Is(target error) bool { return target == ErrWrongScope }

// Use calls fn with the device address while the buffer is live; the
// buffer cannot be released until fn returns. Use it to launch kernels.
// What fn returns, Use returns as it is. fn must not free the buffer nor
// end its scope: the release waits for fn to return, so it would wait
// forever.
func (b Buffer) Use(fn func(ptr uintptr) error) error {
	if b.IsZero() {
		return errZeroBuffer
	}
	var fnErr error
	if err := b.ref.WithPtr(uintptr(b.off()), func(ptr, _ uintptr) error { fnErr = fn(ptr); return nil }); err != nil {
		return deviceError(err) // the buffer's own state: freed, its scope ended
	}
	return fnErr
}

// useOn is Use that also passes the stream the buffer's scope orders its
// work on (see [OnStream]).
func (b Buffer) useOn(fn func(ptr, stream uintptr) error) error {
	if b.IsZero() {
		return errZeroBuffer
	}
	return deviceError(b.ref.WithPtr(uintptr(b.off()), fn))
}

// CopyFromHost copies src to the start of the buffer, ordered on its
// scope's stream, and returns when src may be reused.
func (b Buffer) CopyFromHost(src []byte) error {
	return b.useOn(func(ptr, stream uintptr) error {
		if int64(len(src)) > b.Size() {
			return prefixed.Kind("gpu", ErrInvalidSize, "CopyFromHost: %d bytes into a %d-byte buffer", len(src), b.Size())
		}
		return b.dev.drv.CopyHtoD(ptr, src, stream)
	})
}

// CopyToHost copies the start of the buffer into dst, ordered on its
// scope's stream, and returns when dst holds it.
func (b Buffer) CopyToHost(dst []byte) error {
	return b.useOn(func(ptr, stream uintptr) error {
		if int64(len(dst)) > b.Size() {
			return prefixed.Kind("gpu", ErrInvalidSize, "CopyToHost: %d bytes from a %d-byte buffer", len(dst), b.Size())
		}
		return b.dev.drv.CopyDtoH(dst, ptr, stream)
	})
}

// CopyFrom copies all of src, which may be on another device, to the start
// of b, ordered on b's scope's stream (src's use there is recorded, so that
// its memory is not reused before the copy has run). On b's stream it may
// return before the copy has run; Synchronize that stream to wait.
func (b Buffer) CopyFrom(src Buffer) error {
	if src.IsZero() {
		return prefixed.Kind("gpu", ErrWrongScope, "zero source Buffer")
	}
	return b.useOn(func(dst, stream uintptr) error {
		n := src.Size()
		if n > b.Size() {
			return prefixed.Kind("gpu", ErrInvalidSize, "CopyFrom: %d bytes into a %d-byte buffer", n, b.Size())
		}
		return src.useOn(func(from, srcStream uintptr) error {
			if src.dev == b.dev {
				if srcStream != stream {
					if err := src.ref.RecordUse(stream); err != nil {
						return err
					}
				}
				return b.dev.drv.CopyDtoD(dst, from, n, stream)
			}
			// Between devices: directly where the driver can, else
			// through host memory.
			if pc, ok := b.dev.drv.(driver.PeerCopier); ok {
				if err := src.dev.drv.Synchronize(srcStream); err != nil {
					return err
				}
				if done, err := pc.CopyPeer(dst, src.dev.drv, from, n); done || err != nil {
					return err
				}
			}
			tmp := make([]byte, n)
			if err := src.dev.drv.CopyDtoH(tmp, from, srcStream); err != nil {
				return err
			}
			return b.dev.drv.CopyHtoD(dst, tmp, stream)
		})
	})
}

// Memset sets every byte of the buffer to v, ordered on its scope's
// stream: on a stream of its own it may return before it has run.
func (b Buffer) Memset(v byte) error {
	return b.useOn(func(ptr, stream uintptr) error { return b.dev.drv.Memset(ptr, v, b.Size(), stream) })
}

// RecordUse tells the device that work on st uses b, besides b's scope's
// own stream: when b is freed, its memory is not reused on another stream
// before the work queued on st at that moment has completed (PyTorch's
// record_stream).
func (b Buffer) RecordUse(st *Stream) error {
	if b.IsZero() {
		return errZeroBuffer
	}
	if st == nil || st.dev != b.dev {
		return prefixed.Kind("gpu", ErrWrongScope, "RecordUse needs a stream of the buffer's device")
	}
	return st.life.use(errStreamEnded, func() error { return deviceError(b.ref.RecordUse(st.id)) })
}
