// Package capi lets a C library that a Go program calls through cgo
// allocate device memory through gpuscope: from a scope's pool, under its
// device's cap, counted in its Summary and leak checks like the memory Go
// code allocates.
//
// For a library that takes an allocator as a context pointer and two
// functions of these shapes, [For] gives a scope in that form (a library
// whose hook has another shape needs a shim of its own between the two):
//
//	void *alloc(void *ctx, size_t size, cudaStream_t stream);
//	void free(void *ctx, void *ptr, size_t size, cudaStream_t stream);
//
// It needs cgo; package gpu and those below it do not. The shared library
// for programs that are not Go (PyTorch's pluggable allocator, CuPy's) is
// cmd/libgpuscope: importing this package links none of its entry points.
package capi
