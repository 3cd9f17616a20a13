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

// One call through a context-form allocator, on a C thread of its own:
// what a library's thread does once.
enum { ctx_alloc, ctx_free, ctx_free_never_given };

struct once_args {
	void *ctx;
	alloc_fn alloc;
	free_fn free;
	int op;
	uintptr_t ptr;
	size_t size;
	uintptr_t got;
};

static char never[1024]; // memory the allocator never gave

static void *ctx_once_worker(void *p) {
	struct once_args *a = p;
	switch (a->op) {
	case ctx_alloc:
		a->got = (uintptr_t)a->alloc(a->ctx, a->size, NULL);
		break;
	case ctx_free:
		a->free(a->ctx, (void *)a->ptr, a->size, NULL);
		break;
	case ctx_free_never_given:
		a->free(a->ctx, never, sizeof never, NULL);
		break;
	}
	return NULL;
}

// ctx_once makes one call, op, through the allocator from a new C thread:
// an allocation of size bytes (it returns the pointer), a free of ptr, or
// a free of memory the allocator never gave.
uintptr_t ctx_once(void *ctx, void *alloc, void *free, int op, uintptr_t ptr, size_t size) {
	struct once_args a = {ctx, (alloc_fn)alloc, (free_fn)free, op, ptr, size, 0};
	pthread_t t;
	if (pthread_create(&t, NULL, ctx_once_worker, &a) != 0) {
		return 0;
	}
	pthread_join(t, NULL);
	return a.got;
}
