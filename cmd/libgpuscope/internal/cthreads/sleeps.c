// Frees from C threads while the calling thread puts their scope to sleep
// and wakes it: PyTorch's garbage collector frees a tensor whenever it
// runs, and a framework drops tensors around a sleep.
#include <pthread.h>
#include <stdint.h>

#include "gpuscope.h"

struct sleeps_freer {
	const uintptr_t *ptrs;
	long n;
	long size;
	uintptr_t stream; // the stream the free names
};

static void *sleeps_free(void *p) {
	struct sleeps_freer *f = p;
	for (long i = 0; i < f->n; i++) {
		gpuscope_free((void *)f->ptrs[i], f->size, 0, (void *)f->stream);
	}
	return NULL;
}

// c_frees_racing_sleep frees the n buffers of size bytes at ptrs,
// allocated for the default stream, from threads C threads, each a part
// (the odd ones naming another stream, as a free after a record_stream
// may), while the calling thread puts scope to sleep, keeping its
// contents, and wakes it, cycles times. It returns how many of those
// sleeps and wakes failed.
int c_frees_racing_sleep(int64_t scope, const uintptr_t *ptrs, long n, long size, int threads, int cycles) {
	enum { most = 16 };
	struct sleeps_freer f[most];
	pthread_t t[most];
	threads = threads > most ? most : threads;
	long per = n / threads;
	for (int i = 0; i < threads; i++) {
		f[i] = (struct sleeps_freer){ptrs + i * per, i == threads - 1 ? n - i * per : per, size, i % 2 ? 0x6000 : 0};
		pthread_create(&t[i], NULL, sleeps_free, &f[i]);
	}
	int failed = 0;
	for (int i = 0; i < cycles; i++) {
		failed += gpuscope_scope_sleep(scope, GPUSCOPE_KEEP_CONTENTS) != 0;
		failed += gpuscope_scope_wake(scope) != 0;
	}
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
	}
	return failed;
}
