package capi

import (
	"unsafe"

	"github.com/gpuscope/gpuscope/gpu"
)

// Allocator is a scope in the form that C libraries take an allocator in:
// a context pointer and two C functions, to hand to the library through
// cgo. What the library allocates through it belongs to the scope (its
// Summary, leak checks, limits) and is freed with it at the latest. The
// functions are safe from any thread, at once; a call that fails returns
// NULL, or frees nothing, and writes its message to standard error (the
// process's first 100 failed calls from C).
type Allocator struct {
	// Ctx is the context pointer, C memory, that the library passes back
	// to Alloc and Free.
	Ctx unsafe.Pointer
	// Alloc is a C function, void *(*)(void *ctx, size_t size, cudaStream_t stream):
	// size bytes in the scope, or NULL.
	Alloc unsafe.Pointer
	// Free is a C function, void (*)(void *ctx, void *ptr, size_t size, cudaStream_t stream):
	// frees ptr, which this Allocator's Alloc returned; size is the size
	// allocated, or 0 where the library does not say.
	Free unsafe.Pointer
}

// For returns an Allocator that allocates in s, for as long as s is open:
// once s ends, or its context is done, calls through it fail with an error
// and change nothing. The 8 bytes of C memory at Ctx stay for the process's
// life, so that a late call reads no freed memory.
func For(s *gpu.Scope) (Allocator, error) {
	id, err := attach(s)
	if err != nil {
		return Allocator{}, err
	}
	alloc, free := ctxFuncs()
	return Allocator{Ctx: newCtx(id), Alloc: alloc, Free: free}, nil
}
