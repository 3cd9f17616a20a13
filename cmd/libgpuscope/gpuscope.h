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
 * What a library allocates belongs to a scope: the innermost one the
 * calling thread began on the device and has not ended (each thread has its
 * own, as PyTorch's use_mem_pool and CuPy's using_allocator are per thread);
 * for a thread with none, the scope the allocation's stream is bound to
 * (gpuscope_scope_bind: PyTorch's autograd thread allocates for the stream
 * of the work it runs); else the device's root scope, "libgpuscope".
 *
 * Every call is safe from any thread, at once. A call that fails returns
 * NULL, 0 or a negative value, or nothing for the frees, and loses nothing:
 * its message goes to standard error (the first 100 written; a binding
 * that raises each as its language's error turns that off,
 * gpuscope_print_failures), to gpuscope_last_error in the calling thread,
 * and to the "c_last_error" field of gpuscope_stats, whose "c_failures"
 * counts them. A stream is a
 * cudaStream_t; NULL is the legacy default stream, whose work waits for
 * every blocking stream's. A program built with per-thread default
 * streams means another stream by NULL on each thread, and so does
 * cudaStreamPerThread anywhere: gpuscope takes each for one stream, so that
 * a block freed on one thread's may serve another thread's at once (and
 * for cudaStreamPerThread it waits for the calling thread's alone). Such
 * a program passes streams of its own.
 *
 * In the child of a fork() every call fails at once, with a message (a free
 * quietly, since the memory is the parent's: a forked worker may drop
 * objects it inherited): the Go runtime and the devices stay with the
 * parent. A child that needs the device execs a new program, as CUDA itself
 * requires.
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
 * to a child of their scope on that stream, "stream 0x...". A free that
 * names another stream than the allocation's waits for that stream too.
 * Past the cap, the pool first gives back what it caches and tries again,
 * as c10's allocator does; then alloc returns NULL, and
 * gpuscope_last_error says GPUSCOPE_OUT_OF_MEMORY, with the cap and the
 * scopes that hold the memory (use_torch's shim raises it as
 * torch.cuda.OutOfMemoryError).
 *
 * A block the library freed through gpuscope_free or gpuscope_cupy_free is
 * kept, on the C side, for its next allocation of the same size on the same
 * stream in the same scope (the pair cache, docs/interop.md): such a pair
 * never enters Go. The cache keeps the 32 blocks freed last. Until one is
 * served or freed it counts as its scope's, but in no peak: an allocation
 * the cache does not serve frees first the blocks the pool could serve it
 * from and those it would count in a peak it raises; gpuscope_stats,
 * gpuscope_summary, gpuscope_set_max_reserved, gpuscope_empty_cache and a
 * pool short of memory free all it holds, and a scope's end its scope's.
 * GPUSCOPE_PAIR_CACHE=0 turns the cache off for a device opened, or a
 * scope begun, while it is set. */
void *gpuscope_alloc(ssize_t size, int device, void *stream);
void gpuscope_free(void *ptr, ssize_t size, int device, void *stream);

/* PyTorch's record_stream (the pluggable allocator's record_stream_fn):
 * work on stream uses ptr, so that its memory is not reused elsewhere
 * before that work has completed; the default stream (NULL) too, for a
 * block of another stream. A NULL ptr (an empty tensor's) does nothing. */
void gpuscope_record_stream(void *ptr, void *stream);

/* CuPy's cupy.cuda.memory.CFunctionAllocator. param 0 allocates in the
 * calling thread's scope on the device; a scope id from
 * gpuscope_scope_begin, in that scope (so that each framework may keep its
 * own). malloc returns 0 on failure (gpuscope.py's use_cupy raises CuPy's
 * OutOfMemoryError for it). CuPy passes no stream: its memory is the
 * default stream's.
 *
 * gpuscope_cupy_stream_malloc and gpuscope_cupy_stream_free are
 * gpuscope_alloc and gpuscope_free in CuPy's form, for one stream: param
 * is the stream (a cudaStream_t) that was CuPy's current one as it
 * allocated, so that a block freed is reused at once on that stream and on
 * another only once the work queued on it has completed, as CuPy's pool
 * keeps a stream's blocks for its stream (gpuscope.py's use_cupy makes a
 * CFunctionAllocator for each stream CuPy allocates on). The stream must
 * outlive what was allocated for it. */
intptr_t gpuscope_cupy_malloc(intptr_t param, size_t size, int device);
void gpuscope_cupy_free(intptr_t param, intptr_t ptr, int device);
intptr_t gpuscope_cupy_stream_malloc(intptr_t stream, size_t size, int device);
void gpuscope_cupy_stream_free(intptr_t stream, intptr_t ptr, int device);

/* GPUSCOPE_FREE_LIVE, for gpuscope_scope_end: the libraries are done with
 * what they still hold in the scope; free it. */
#define GPUSCOPE_FREE_LIVE 1

/* gpuscope_scope_begin opens a scope named name (NULL: unnamed) on device,
 * inside the calling thread's innermost scope there (the device's root
 * where it has none), and makes it the thread's innermost: what the thread
 * allocates on the device belongs to it until it ends. Scopes begun by
 * other threads are its siblings. A thread may have 128 open. It returns
 * the scope's id, > 0, or < 0 on failure.
 *
 * gpuscope_scope_end ends it, from any thread: what libraries still hold
 * in it passes to the enclosing scope (flags 0) or is freed
 * (GPUSCOPE_FREE_LIVE); memory a library may still use is freed only where
 * the caller says so. An allocation another thread makes in it as it ends
 * is the scope's (and freed with it, with GPUSCOPE_FREE_LIVE), or is made
 * again in the enclosing scope. A scope with scopes still open inside it
 * does not end; siblings end apart. The thread that began it allocates in the
 * enclosing scope from then on. A thread that exits leaves its scopes
 * open: end them before. It returns 0, or < 0 on failure; what was
 * still live is in "last_scope_end" of gpuscope_stats.
 *
 * gpuscope_scope_bind binds stream (NULL: the default stream) to scope,
 * until the scope ends: a thread with no scope of its own on the scope's
 * device that allocates for that stream allocates in it (PyTorch's autograd
 * thread, which runs every backward pass on the stream of its forward). A
 * thread's own scope comes first. A scope begun inside the one a stream is
 * bound to may bind it too, over it, until it ends (scopes nest); any
 * other scope's bind of a bound stream fails. A device holds 64 bindings.
 * It returns 0, or < 0 on failure.
 *
 * gpuscope_scope_stats writes the scope's counters as JSON ("path",
 * "live": its bytes with its children's, "peak", "allocations": its own
 * buffers, "children") into buf, as gpuscope_stats does; 0 where the scope
 * is not open. */
int64_t gpuscope_scope_begin(int device, const char *name);
int gpuscope_scope_end(int64_t scope, int flags);
int gpuscope_scope_bind(int64_t scope, void *stream);
size_t gpuscope_scope_stats(int64_t scope, char *buf, size_t len);

/* GPUSCOPE_SLEEPABLE, for gpuscope_scope_begin_flags; GPUSCOPE_KEEP_CONTENTS,
 * for gpuscope_scope_sleep. */
#define GPUSCOPE_SLEEPABLE 1
#define GPUSCOPE_KEEP_CONTENTS 1

/* gpuscope_scope_begin_flags is gpuscope_scope_begin with flags: 0, or
 * GPUSCOPE_SLEEPABLE for a scope whose memory can sleep (docs/sleep.md):
 * what libraries allocate in it, and in the scopes begun inside it, lives
 * in device memory of its own, which gpuscope_scope_sleep gives back to
 * the driver while the addresses stay reserved, and gpuscope_scope_wake
 * maps again at the same addresses. A sleepable scope inside another
 * sleepable scope is refused. Its end with flags 0 passes nothing on:
 * where libraries still hold buffers in it, it stays open under its id,
 * no thread's, so that it can sleep and wake, until an end finds none
 * held (once the libraries freed them, asleep or awake) or is given
 * GPUSCOPE_FREE_LIVE (a scope it is inside does not end before it). The
 * pair cache keeps none of its blocks, nor of the scopes begun inside it.
 *
 * gpuscope_scope_sleep waits for the work queued on the streams the
 * scope's buffers were allocated for and recorded on (work on other
 * streams is the caller's to wait for: torch.cuda.synchronize()), then,
 * with GPUSCOPE_KEEP_CONTENTS, copies what they hold to page-locked host
 * memory, and gives their device memory back; without it, they wake as
 * zeros. While the scope sleeps, an allocation in it fails, and a library
 * must not use its buffers; a free of one (gpuscope_free,
 * gpuscope_cupy_free, PyTorch's through use_torch's shim) succeeds and
 * touches no memory, whatever stream it names: what the buffer held is
 * not copied back, and memory that then holds no buffer is not the
 * scope's to wake. On the host device the memory given back can be
 * allocated by another scope until the first wakes. It fails whole: the
 * scope is awake and holds what it held.
 *
 * gpuscope_scope_wake maps new memory under the scope's buffers at their
 * addresses and copies back what sleep kept; where the device (or the cap)
 * has no room it fails whole (GPUSCOPE_OUT_OF_MEMORY), the scope asleep
 * with what it kept, for a later wake. A scope awake is left as it is.
 * Each returns 0, or < 0 on failure. */
int64_t gpuscope_scope_begin_flags(int device, const char *name, int flags);
int gpuscope_scope_sleep(int64_t scope, int flags);
int gpuscope_scope_wake(int64_t scope);

/* gpuscope_set_max_reserved caps the bytes device's pool reserves from the
 * driver, while the program runs; 0 removes the cap.
 * gpuscope_set_memory_fraction caps it at fraction, in (0, 1], of the
 * device's memory (PyTorch's set_per_process_memory_fraction).
 * gpuscope_empty_cache gives what device's pool caches back to the driver;
 * device -1: every device opened (PyTorch's empty_cache). Each returns 0,
 * or < 0 on failure. */
int gpuscope_set_max_reserved(int device, size_t bytes);
int gpuscope_set_memory_fraction(int device, double fraction);
int gpuscope_empty_cache(int device);

/* gpuscope_name_call makes the messages that advise the C call c_name
 * write name instead: what a binding in another language calls it, so that
 * its users read a call they can make (gpuscope.py names
 * gpuscope_set_max_reserved and gpuscope_empty_cache, which out-of-memory
 * errors advise, gpuscope.set_max_reserved and gpuscope.empty_cache). NULL
 * or "" gives the call its C name back, for the whole process. It returns
 * 0, or < 0 for a c_name the messages do not advise. */
int gpuscope_name_call(const char *c_name, const char *name);

/* gpuscope_stats writes device's counters as JSON (gpu.Stats, with
 * "device", "scope": the calling thread's scope's path, "c_pair_hits":
 * allocations the pair cache served, not counted in "allocs",
 * "c_pair_allocs": the allocations through gpuscope_alloc and
 * gpuscope_cupy_malloc it looked at, served or not, "c_pair_late": blocks
 * it handed back after their scope's end had freed them (nothing is
 * freed twice; in the process, as "c_failures"), "c_failures",
 * "c_last_error"), and gpuscope_summary its Summary, the table of its
 * scopes, into buf, as snprintf does: at most len bytes with the
 * terminating NUL, returning the length of the whole text without it. */
size_t gpuscope_stats(int device, char *buf, size_t len);
size_t gpuscope_summary(int device, char *buf, size_t len);

/* The kinds of a failure, as gpuscope_last_error gives them. */
#define GPUSCOPE_OUT_OF_MEMORY 1 /* for want of memory: the cap, or the device */
#define GPUSCOPE_FAILED 2        /* any other */
#define GPUSCOPE_INVALID_SIZE 3  /* a size, a cap or a fraction that can never work */

/* gpuscope_last_error writes the message of the calling thread's last
 * failed call (its first 4095 bytes) into buf, as gpuscope_stats does,
 * and its kind into *kind (where kind is not NULL); 0 and kind 0 where the
 * thread has had no failure. A call that succeeds leaves it as it was. */
size_t gpuscope_last_error(char *buf, size_t len, int *kind);

/* gpuscope_print_failures with on 0 stops writing to standard error the
 * failures of the calls that return one (NULL, 0 or < 0), in the whole
 * process, for a binding that raises each with its message, as PyTorch's
 * and CuPy's allocators raise theirs and print nothing (gpuscope.py turns
 * it off as it loads the library); a free or gpuscope_record_stream that
 * fails, which returns nothing, is written still. With on 1 it writes them
 * again, as at load. It returns 0. */
int gpuscope_print_failures(int on);

#ifdef __cplusplus
}
#endif

#endif /* GPUSCOPE_H */
