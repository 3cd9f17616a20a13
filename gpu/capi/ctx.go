package capi

/*
#include <stdint.h>
#include <stdlib.h>
void *gpuscopeCtxAlloc(void *ctx, size_t size, void *stream);
void gpuscopeCtxFree(void *ctx, void *ptr, size_t size, void *stream);
*/
import "C"

import "unsafe"

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
