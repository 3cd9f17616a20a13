// Pairs timed on a thread Go did not make, as a library's thread calls:
// BenchmarkCPair's loop, through gpuscope's PyTorch or CuPy entry points or
// the minimal free list per size that scripts/measure times the frameworks'
// wrappers over (interop_freelist.c, on host memory here), in either form.
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "gpuscope.h"

#define FL_HOST
#include "../../../../scripts/measure/interop_freelist.c"

// CuPy's form, called as the PyTorch form's: what CFunctionAllocator calls,
// its param 0.
static void *cupy_alloc(ssize_t size, int device, void *stream) {
	(void)stream;
	return (void *)gpuscope_cupy_malloc(0, (size_t)size, device);
}

static void cupy_free(void *ptr, ssize_t size, int device, void *stream) {
	(void)size, (void)stream;
	gpuscope_cupy_free(0, (intptr_t)ptr, device);
}

static void *fl_cupy_alloc(ssize_t size, int device, void *stream) {
	(void)stream;
	return (void *)fl_cupy_malloc(0, (size_t)size, device);
}

static void fl_cupy_free_(void *ptr, ssize_t size, int device, void *stream) {
	(void)size, (void)stream;
	fl_cupy_free(0, (intptr_t)ptr, device);
}

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
// thread, through gpuscope's PyTorch form (how 0), the free list (1),
// gpuscope's CuPy form (2) or the free list in CuPy's form (3), and
// returns 0, or -1 where an allocation failed.
int c_pairs(long n, long size, int how) {
	struct pairs_args a = {gpuscope_alloc, gpuscope_free, n, (ssize_t)size, 0};
	switch (how) {
	case 1:
		a.alloc = fl_alloc, a.free = fl_free;
		break;
	case 2:
		a.alloc = cupy_alloc, a.free = cupy_free;
		break;
	case 3:
		a.alloc = fl_cupy_alloc, a.free = fl_cupy_free_;
		break;
	}
	pthread_t t;
	if (pthread_create(&t, NULL, pairs_thread, &a) != 0) {
		return -1;
	}
	pthread_join(t, NULL);
	return a.failed ? -1 : 0;
}

// c_alloc, c_free and c_record_stream are gpuscope_alloc, gpuscope_free
// (on device 0) and gpuscope_record_stream with the pointers as integers,
// for Go's replays.
uintptr_t c_alloc(long size, uintptr_t stream) { return (uintptr_t)gpuscope_alloc(size, 0, (void *)stream); }

void c_free(uintptr_t ptr, long size, uintptr_t stream) { gpuscope_free((void *)ptr, size, 0, (void *)stream); }

void c_record_stream(uintptr_t ptr, uintptr_t stream) { gpuscope_record_stream((void *)ptr, (void *)stream); }

#include "../clib/paircache.h"

// c_track_after_end has device dev's pair cache (one no test opens) track
// an allocation in a scope begun and tracked, in one begun untracked, in
// the root, and in the first once it ended, and returns what pc_track said
// of each, in that order, as the digits of a number.
int c_track_after_end(int dev) {
	pc_block out[PC_OUT];
	pc_set(dev, 1, out);
	pc_begin(dev, 7, 1);
	pc_begin(dev, 8, 0);
	int r = pc_track(dev, 0x10000, 512, 0, 7, 1);
	r = 10 * r + pc_track(dev, 0x20000, 512, 0, 8, 2);
	r = 10 * r + pc_track(dev, 0x30000, 512, 0, 0, 3);
	pc_end(dev, 7, 0, 1, out);
	r = 10 * r + pc_track(dev, 0x40000, 512, 0, 7, 4);
	pc_reset(dev);
	return r;
}
