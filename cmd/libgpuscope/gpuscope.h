/*
 * gpuscope.h: the C allocator of gpuscope, as a shared library
 * (go build -buildmode=c-shared -o libgpuscope.so ./cmd/libgpuscope).
 *
 * Libraries allocate device memory through these calls from the same pool,
 * under the same cap, scopes, Summary and leak check as Go code. Device i is
 * GPU i (a build with -tags cuda, on the primary context the CUDA runtime
 * shares), opened on first use; without -tags cuda, device 0 is memory in
 * host RAM (GPUSCOPE_HOST_MEMORY bytes, default 1 GiB), for tests.
 *
 * What a library allocates belongs to the scope current on the device when
 * it allocates: the innermost one begun and not ended, for every thread of
 * the process (autograd allocates from threads of its own), or the device's
 * root scope, "libgpuscope", where none is.
 *
 * Every call is safe from any thread, at once. A call that fails returns
 * NULL, 0 or a negative value, or nothing for the frees, and loses nothing:
 * its message goes to standard error (the first 100 of them) and to the
 * "c_last_error" field of gpuscope_stats, whose "c_failures" counts them.
 * A stream is a cudaStream_t; NULL is the default stream.
 */
#ifndef GPUSCOPE_H
#define GPUSCOPE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* PyTorch's torch.cuda.memory.CUDAPluggableAllocator. alloc returns NULL
 * for size 0, quietly, as c10's allocator does: no error, no message, no
 * failure counted (so do gpuscope_cupy_malloc and a context form's alloc).
 * It returns NULL on failure: size < 0, more than the device holds, no
 * such device. free
 * frees nothing where ptr is not a live allocation of this library, or
 * size or device are not those it was allocated with; free(NULL) does
 * nothing. A block allocated for a stream is reused at once on that
 * stream, and on another only after the work queued on the first at the
 * free has completed: allocations for a stream other than the default go
 * to a child of the current scope on that stream, "stream 0x...".
 *
 * A block the library freed through gpuscope_free is kept, on the C side,
 * for its next allocation of the same size on the same stream in the same
 * scope (the pair cache, docs/interop.md): such a pair never enters Go.
 * Until then it counts as the scope's; gpuscope_stats, gpuscope_summary,
 * gpuscope_set_max_reserved, a scope's begin and end, every allocation the
 * cache does not serve and a pool short of memory free it first.
 * GPUSCOPE_PAIR_CACHE=0 turns the cache off for scopes begun after. */
void *gpuscope_alloc(ssize_t size, int device, void *stream);
void gpuscope_free(void *ptr, ssize_t size, int device, void *stream);

/* PyTorch's record_stream (the pluggable allocator's record_stream_fn):
 * work on stream uses ptr, so that its memory is not reused elsewhere
 * before that work has completed. */
void gpuscope_record_stream(void *ptr, void *stream);

/* CuPy's cupy.cuda.memory.CFunctionAllocator. param 0 allocates in the
 * scope current on the device; a scope id from gpuscope_scope_begin, in
 * that scope (so that each framework may keep its own). malloc returns 0
 * on failure. CuPy passes no stream: its memory is the default stream's. */
intptr_t gpuscope_cupy_malloc(intptr_t param, size_t size, int device);
void gpuscope_cupy_free(intptr_t param, intptr_t ptr, int device);

/* GPUSCOPE_FREE_LIVE, for gpuscope_scope_end: the libraries are done with
 * what they still hold in the scope; free it. */
#define GPUSCOPE_FREE_LIVE 1

/* gpuscope_scope_begin opens a scope named name (NULL: unnamed) inside the
 * scope current on device, and makes it current for every thread. It
 * returns the scope's id, > 0, or < 0 on failure.
 *
 * gpuscope_scope_end ends it: what libraries still hold in it passes to
 * the enclosing scope (flags 0) or is freed (GPUSCOPE_FREE_LIVE); memory a
 * library may still use is freed only where the caller says so. A scope
 * with scopes still open inside it does not end. It returns 0, or < 0 on
 * failure; what was still live is in "last_scope_end" of gpuscope_stats. */
int64_t gpuscope_scope_begin(int device, const char *name);
int gpuscope_scope_end(int64_t scope, int flags);

/* gpuscope_set_max_reserved caps the bytes device's pool reserves from the
 * driver, while the program runs; 0 removes the cap. 0, or < 0 on
 * failure. */
int gpuscope_set_max_reserved(int device, size_t bytes);

/* gpuscope_stats writes device's counters as JSON (gpu.Stats, with
 * "device", "scope": the current scope's path, "c_pair_hits": pairs the
 * pair cache served, not counted in "allocs" and "frees", "c_failures",
 * "c_last_error"), and gpuscope_summary its Summary, the table of its
 * scopes, into buf, as snprintf does: at most len bytes with the
 * terminating NUL, returning the length of the whole text without it. */
size_t gpuscope_stats(int device, char *buf, size_t len);
size_t gpuscope_summary(int device, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* GPUSCOPE_H */
