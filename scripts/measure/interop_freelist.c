// interop_freelist is the minimal allocator PyTorch's pluggable-allocator
// path is measured over (docs/interop.md): a free list per size, under one
// mutex, over cudaMalloc, never giving memory back. What
// torch.empty + del costs through it is what PyTorch's wrapper costs
// (CUDAPluggableAllocator's own lock and map), with almost nothing of an
// allocator's; gpuscope's cost is read against it. Its two functions have
// PyTorch's signatures:
//
//   torch.cuda.memory.CUDAPluggableAllocator("interop_freelist.so", "fl_alloc", "fl_free")
//
// Build (interop-gpu.sh does): gcc -O2 -shared -fPIC -I$CUDA/include
// interop_freelist.c -o interop_freelist.so -L$CUDA/lib64 -lcudart
//
// With FL_HOST defined it allocates host memory (malloc), for the reference
// that cmd/libgpuscope's BenchmarkCFreeList times beside gpuscope's pair on
// a machine without a GPU.
#ifdef FL_HOST
#include <stdlib.h>
typedef int cudaError_t;
enum { cudaSuccess = 0 };
static cudaError_t cudaMalloc(void **p, size_t size) { return (*p = malloc(size)) != NULL ? cudaSuccess : 1; }
static cudaError_t cudaFree(void *p) { return free(p), cudaSuccess; }
#else
#include <cuda_runtime_api.h>
#endif
#include <pthread.h>
#include <stdlib.h>
#include <sys/types.h>

enum { BUCKETS = 256 }; // sizes kept apart, open addressing; more fail

typedef struct {
  ssize_t size; // 0: unused
  void **ptrs;
  int n, cap;
} bucket;

static bucket buckets[BUCKETS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; // protects buckets

static bucket *find(ssize_t size) {
  unsigned long h = (unsigned long)size * 0x9E3779B97F4A7C15ul;
  for (int i = 0; i < BUCKETS; i++) {
    bucket *b = &buckets[(h + i) % BUCKETS];
    if (b->size == size) return b;
    if (b->size == 0) {
      b->size = size;
      return b;
    }
  }
  return NULL;
}

void *fl_alloc(ssize_t size, int device, void *stream) {
  (void)device, (void)stream;
  pthread_mutex_lock(&mu);
  bucket *b = find(size);
  if (b != NULL && b->n > 0) {
    void *p = b->ptrs[--b->n];
    pthread_mutex_unlock(&mu);
    return p;
  }
  pthread_mutex_unlock(&mu);
  void *p = NULL;
  if (cudaMalloc(&p, size > 0 ? (size_t)size : 1) != cudaSuccess) return NULL;
  return p;
}

void fl_free(void *ptr, ssize_t size, int device, void *stream) {
  (void)device, (void)stream;
  pthread_mutex_lock(&mu);
  bucket *b = find(size);
  if (b != NULL && b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 16;
    void **ptrs = realloc(b->ptrs, cap * sizeof *ptrs);
    if (ptrs != NULL) b->ptrs = ptrs, b->cap = cap;
  }
  if (b != NULL && b->n < b->cap) {
    b->ptrs[b->n++] = ptr;
    pthread_mutex_unlock(&mu);
    return;
  }
  pthread_mutex_unlock(&mu);
  cudaFree(ptr); // no room to keep it: give it back
}
