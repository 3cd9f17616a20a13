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

	"github.com/gpuscope/gpuscope/internal/ccall"
)

// The C side of Allocator: its context is 8 bytes of C memory holding the
// id of its scope's record (allocator.c reads it), so that no Go pointer
// passes to C.

// newCtx returns a context holding id.
func newCtx(id int64) unsafe.Pointer {
	ctx := C.malloc(C.size_t(unsafe.Sizeof(C.int64_t(0))))
	*(*C.int64_t)(ctx) = C.int64_t(id)
	return ctx
}

// ctxFuncs returns the context form's C functions.
func ctxFuncs() (alloc, free unsafe.Pointer) {
	return C.gpuscopeCtxAlloc, C.gpuscopeCtxFree
}

//export gpuscopeGoCtxAlloc
func gpuscopeGoCtxAlloc(id C.int64_t, size C.size_t, stream C.uintptr_t) C.uintptr_t {
	ptr, err := ctxAlloc(int64(id), uint64(size), uintptr(stream))
	if err != nil {
		ccall.Fail("context allocator", err)
		return 0
	}
	return C.uintptr_t(ptr)
}

//export gpuscopeGoCtxFree
func gpuscopeGoCtxFree(id C.int64_t, ptr C.uintptr_t, size C.size_t, stream C.uintptr_t) {
	if err := ctxFree(int64(id), uintptr(ptr), uint64(size), uintptr(stream)); err != nil {
		ccall.Fail("context allocator's free", err)
	}
}

// ctxAlloc is the context form's alloc, for the Allocator of id. Size 0
// is no allocation and no failure: address 0, as c10's allocator and
// malloc(0) may give.
func ctxAlloc(id int64, size uint64, stream uintptr) (uintptr, error) {
	n, err := ccall.Size(size)
	if n == 0 || err != nil {
		return 0, err
	}
	a, err := lookup(id)
	if err != nil {
		return 0, err
	}
	return a.alloc(n, stream)
}

// ctxFree is the context form's free, for the Allocator of id; size 0 is
// a size the library does not say.
func ctxFree(id int64, ptr uintptr, size uint64, stream uintptr) error {
	if ptr == 0 {
		return nil
	}
	n, err := ccall.Size(size)
	if err != nil {
		return err
	}
	if n == 0 {
		n = -1
	}
	a, err := lookup(id)
	if err != nil {
		return err
	}
	return a.free(ptr, n, stream)
}
