// Package capi lets C libraries allocate device memory through gpuscope:
// from a scope's pool, under its device's cap, counted in its Summary and
// leak checks like the memory Go code allocates.
//
// For a library that a Go program calls through cgo and that takes an
// allocator as a context pointer and two functions (ONNX Runtime's
// OrtAllocator, RMM's callback_memory_resource, a ggml buffer type), [For]
// gives a scope in that form:
//
//	void *alloc(void *ctx, size_t size, cudaStream_t stream);
//	void free(void *ctx, void *ptr, size_t size, cudaStream_t stream);
//
// The package also holds the C entry points of libgpuscope, the shared
// library of cmd/libgpuscope (PyTorch's pluggable allocator, CuPy's), which
// gpuscope.h there declares. It needs cgo; package gpu and those below it
// do not.
package capi
