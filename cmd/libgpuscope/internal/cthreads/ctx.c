// Threads that call a context-form allocator (gpu/capi.Allocator) through
// its function pointers, as a C library does.
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef void *(*alloc_fn)(void *ctx, size_t size, void *stream);
typedef void (*free_fn)(void *ctx, void *ptr, size_t size, void *stream);

struct ctx_args {
	void *ctx;
	alloc_fn alloc;
	free_fn free;
	unsigned seed;
	int keep; // buffers to leave allocated
	int failed;
};

static void *ctx_worker(void *p) {
	struct ctx_args *a = p;
	enum { held = 8 };
	void *ptrs[held] = {0};
	size_t sizes[held] = {0};
	for (int i = 0; i < 1000; i++) {
		int k = rand_r(&a->seed) % held;
		if (ptrs[k] != NULL) {
			a->free(a->ctx, ptrs[k], (i & 1) ? sizes[k] : 0, NULL);
		}
		sizes[k] = 1 + rand_r(&a->seed) % 100000;
		ptrs[k] = a->alloc(a->ctx, sizes[k], NULL);
		if (ptrs[k] == NULL) {
			a->failed++;
		}
	}
	for (int k = a->keep; k < held; k++) {
		a->free(a->ctx, ptrs[k], sizes[k], NULL);
	}
	return NULL;
}

// ctx_threads runs threads calls through the allocator, each leaving keep
// buffers allocated, and returns how many allocations failed.
int ctx_threads(void *ctx, void *alloc, void *free, int threads, int keep) {
	pthread_t t[64];
	struct ctx_args args[64];
	int failed = 0;
	for (int i = 0; i < threads && i < 64; i++) {
		args[i] = (struct ctx_args){ctx, (alloc_fn)alloc, (free_fn)free, (unsigned)i + 1, keep, 0};
		pthread_create(&t[i], NULL, ctx_worker, &args[i]);
	}
	for (int i = 0; i < threads && i < 64; i++) {
		pthread_join(t[i], NULL);
		failed += args[i].failed;
	}
	return failed;
}
