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
// CuPy's cupy.cuda.memory.CFunctionAllocator takes the same free list in
// its form, whose free gives no size, for the control of issue 47:
//
//   cupy.cuda.memory.CFunctionAllocator(0, fl_cupy_malloc_addr, fl_cupy_free_addr, None)
//
// (the two functions' addresses, from ctypes); a table from address to size,
// under the same mutex, gives the free its size.
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
#include <stdint.h>
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

// pop returns a block of size bytes from its free list, or NULL. Called
// with mu held.
static void *pop(ssize_t size) {
  bucket *b = find(size);
  return b != NULL && b->n > 0 ? b->ptrs[--b->n] : NULL;
}

// push keeps ptr, of size bytes, on its free list; 0 where there was no
// room. Called with mu held.
static int push(void *ptr, ssize_t size) {
  bucket *b = find(size);
  if (b != NULL && b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 16;
    void **ptrs = realloc(b->ptrs, cap * sizeof *ptrs);
    if (ptrs != NULL) b->ptrs = ptrs, b->cap = cap;
  }
  if (b == NULL || b->n == b->cap) return 0;
  b->ptrs[b->n++] = ptr;
  return 1;
}

// fresh returns size bytes from cudaMalloc, or NULL.
static void *fresh(ssize_t size) {
  void *p = NULL;
  if (cudaMalloc(&p, size > 0 ? (size_t)size : 1) != cudaSuccess) return NULL;
  return p;
}

void *fl_alloc(ssize_t size, int device, void *stream) {
  (void)device, (void)stream;
  pthread_mutex_lock(&mu);
  void *p = pop(size);
  pthread_mutex_unlock(&mu);
  return p != NULL ? p : fresh(size);
}

void fl_free(void *ptr, ssize_t size, int device, void *stream) {
  (void)device, (void)stream;
  pthread_mutex_lock(&mu);
  int kept = push(ptr, size);
  pthread_mutex_unlock(&mu);
  if (!kept) cudaFree(ptr); // no room to keep it: give it back
}

// The sizes of the blocks fl_cupy_malloc gave, for fl_cupy_free: an
// open-addressed table from address to size, grown by doubling.
static struct {
  void **ptrs; // NULL: an empty place
  ssize_t *sizes;
  size_t cap, n;
} sized;

static size_t slot(void *ptr, size_t cap) {
  return ((unsigned long)ptr >> 8) * 0x9E3779B97F4A7C15ul % cap;
}

// remember notes ptr's size; 0 where no memory was left for the table.
// Called with mu held.
static int remember(void *ptr, ssize_t size) {
  if (2 * (sized.n + 1) > sized.cap) {
    size_t cap = sized.cap ? 2 * sized.cap : 1024;
    void **ptrs = calloc(cap, sizeof *ptrs);
    ssize_t *sizes = calloc(cap, sizeof *sizes);
    if (ptrs == NULL || sizes == NULL) return free(ptrs), free(sizes), 0;
    for (size_t i = 0; i < sized.cap; i++) {
      if (sized.ptrs[i] == NULL) continue;
      size_t j = slot(sized.ptrs[i], cap);
      while (ptrs[j] != NULL) j = (j + 1) % cap;
      ptrs[j] = sized.ptrs[i], sizes[j] = sized.sizes[i];
    }
    free(sized.ptrs), free(sized.sizes);
    sized.ptrs = ptrs, sized.sizes = sizes, sized.cap = cap;
  }
  size_t j = slot(ptr, sized.cap);
  while (sized.ptrs[j] != NULL && sized.ptrs[j] != ptr) j = (j + 1) % sized.cap;
  if (sized.ptrs[j] == NULL) sized.n++;
  sized.ptrs[j] = ptr, sized.sizes[j] = size;
  return 1;
}

// recall returns ptr's size, or -1, and forgets it (shifting back the
// entries after it). Called with mu held.
static ssize_t recall(void *ptr) {
  if (sized.cap == 0) return -1;
  size_t i = slot(ptr, sized.cap);
  while (sized.ptrs[i] != NULL && sized.ptrs[i] != ptr) i = (i + 1) % sized.cap;
  if (sized.ptrs[i] == NULL) return -1;
  ssize_t size = sized.sizes[i];
  for (size_t j = i;;) {
    j = (j + 1) % sized.cap;
    if (sized.ptrs[j] == NULL) break;
    size_t k = slot(sized.ptrs[j], sized.cap);
    if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j)) continue;
    sized.ptrs[i] = sized.ptrs[j], sized.sizes[i] = sized.sizes[j];
    i = j;
  }
  sized.ptrs[i] = NULL;
  sized.n--;
  return size;
}

intptr_t fl_cupy_malloc(intptr_t param, size_t size, int device) {
  (void)param, (void)device;
  pthread_mutex_lock(&mu);
  void *p = pop((ssize_t)size);
  if (p == NULL) {
    pthread_mutex_unlock(&mu);
    if ((p = fresh((ssize_t)size)) == NULL) return 0;
    pthread_mutex_lock(&mu);
  }
  int ok = remember(p, (ssize_t)size);
  pthread_mutex_unlock(&mu);
  if (!ok) return cudaFree(p), 0;
  return (intptr_t)p;
}

void fl_cupy_free(intptr_t param, intptr_t ptr, int device) {
  (void)param, (void)device;
  pthread_mutex_lock(&mu);
  ssize_t size = recall((void *)ptr);
  int kept = size >= 0 && push((void *)ptr, size);
  pthread_mutex_unlock(&mu);
  if (size >= 0 && !kept) cudaFree((void *)ptr);
}
