package capi

/*
#include <stdint.h>
#include <stdlib.h>
void *gpuscopeCtxAlloc(void *ctx, size_t size, void *stream);
void gpuscopeCtxFree(void *ctx, void *ptr, size_t size, void *stream);
*/
import "C"

import (
	"unsafe"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/internal/foreign"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// Allocator is a scope in the form that C libraries take an allocator in:
// a context pointer and two C functions, to hand to the library through
// cgo. What the library allocates through it belongs to the scope (its
// Summary, leak checks, limits) and is freed with it at the latest. The
// functions are safe from any thread, at once; a call that fails returns
// NULL, or frees nothing, and its message goes to standard error and to
// the stats of libgpuscope (gpuscope.h says how a C caller reads them).
type Allocator struct {
	// Ctx is the context pointer, C memory, that the library passes back
	// to Alloc and Free.
	Ctx unsafe.Pointer
	// Alloc is a C function, void *(*)(void *ctx, size_t size, cudaStream_t stream):
	// size bytes in the scope, or NULL.
	Alloc unsafe.Pointer
	// Free is a C function, void (*)(void *ctx, void *ptr, size_t size, cudaStream_t stream):
	// frees ptr, which Alloc returned; size is the size allocated, or 0 where
	// the library does not say.
	Free unsafe.Pointer

	id int64
}

// For returns an Allocator that allocates in s. Close it when the library
// is done with it. Once s ends, calls through it fail.
func For(s *gpu.Scope) (Allocator, error) {
	id, err := foreign.Attach(s)
	if err != nil {
		return Allocator{}, err
	}
	ctx := C.malloc(C.size_t(unsafe.Sizeof(C.int64_t(0))))
	*(*C.int64_t)(ctx) = C.int64_t(id)
	return Allocator{Ctx: ctx, Alloc: C.gpuscopeCtxAlloc, Free: C.gpuscopeCtxFree, id: id}, nil
}

// Close stops a from serving: later calls through it fail with an error
// and change nothing, and what the library still holds stays the scope's,
// freed when the scope ends. The 8 bytes of C memory at Ctx stay, so that
// a late call reads no freed memory. Closing twice is an error.
func (a Allocator) Close() error {
	if a.Ctx == nil {
		return prefixed.Kind("gpu", gpu.ErrScopeClosed, "Close of a zero Allocator")
	}
	err := foreign.Detach(a.id)
	*(*C.int64_t)(a.Ctx) = 0 // names no scope
	return err
}
