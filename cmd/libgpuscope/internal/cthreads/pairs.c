// Pairs timed on a thread Go did not make, as a library's thread calls:
// BenchmarkCPair's loop, through gpuscope's PyTorch entry points or the
// minimal free list per size that scripts/measure times PyTorch's wrapper
// over (interop_freelist.c, on host memory here).
#include <pthread.h>
#include <stddef.h>

#include "gpuscope.h"

#define FL_HOST
#include "../../../../scripts/measure/interop_freelist.c"

struct pairs_args {
	void *(*alloc)(ssize_t size, int device, void *stream);
	void (*free)(void *ptr, ssize_t size, int device, void *stream);
	long n;
	ssize_t size;
	int failed;
};

static void *pairs_thread(void *p) {
	struct pairs_args *a = p;
	for (long i = 0; i < a->n; i++) {
		void *ptr = a->alloc(a->size, 0, NULL);
		if (ptr == NULL) {
			a->failed = 1;
			return NULL;
		}
		a->free(ptr, a->size, 0, NULL);
	}
	return NULL;
}

// c_pairs makes n alloc+free pairs of size bytes on device 0 from a new
// thread, through gpuscope (freelist 0) or the free list (1), and returns
// 0, or -1 where an allocation failed.
int c_pairs(long n, long size, int freelist) {
	struct pairs_args a = {gpuscope_alloc, gpuscope_free, n, (ssize_t)size, 0};
	if (freelist) {
		a.alloc = fl_alloc, a.free = fl_free;
	}
	pthread_t t;
	if (pthread_create(&t, NULL, pairs_thread, &a) != 0) {
		return -1;
	}
	pthread_join(t, NULL);
	return a.failed ? -1 : 0;
}
