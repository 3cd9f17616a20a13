// Scopes that end while other threads allocate in them: threads with no
// scope of their own allocate for a stream bound to a scope, as PyTorch's
// autograd thread does, while the main thread ends that scope, passing on
// what they hold or freeing it, and binds the stream to the next one.
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpuscope.h"

#define ENDS_STREAM ((void *)(uintptr_t)0x7000)

static volatile int ends_stop;

struct ends_worker {
	unsigned seed;
	long allocs;
	int failed;
};

static void *ends_work(void *p) {
	struct ends_worker *w = p;
	while (!__atomic_load_n(&ends_stop, __ATOMIC_ACQUIRE)) {
		ssize_t size = 512 << rand_r(&w->seed) % 4;
		unsigned char *q = gpuscope_alloc(size, 0, ENDS_STREAM);
		if (q == NULL) {
			w->failed = 1;
			return NULL;
		}
		memset(q, 0x5a, (size_t)size);
		gpuscope_free(q, size, 0, ENDS_STREAM);
		w->allocs++;
	}
	return NULL;
}

// c_ends_under_allocations runs threads workers while rounds scopes begin,
// take the stream and end (with flags, 0 or GPUSCOPE_FREE_LIVE), and
// returns how many allocations the workers made, or -1 where one failed or
// a scope would not begin, bind or end.
long c_ends_under_allocations(int threads, int rounds, int flags) {
	enum { most = 16 };
	struct ends_worker w[most] = {0};
	pthread_t t[most];
	threads = threads > most ? most : threads;
	ends_stop = 0;
	for (int i = 0; i < threads; i++) {
		w[i].seed = (unsigned)i + 1;
		pthread_create(&t[i], NULL, ends_work, &w[i]);
	}
	int bad = 0;
	for (int i = 0; i < rounds && !bad; i++) {
		int64_t s = gpuscope_scope_begin(0, "bound");
		bad = s <= 0 || gpuscope_scope_bind(s, ENDS_STREAM) != 0 || gpuscope_scope_end(s, flags) != 0;
	}
	__atomic_store_n(&ends_stop, 1, __ATOMIC_RELEASE);
	long n = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		bad |= w[i].failed;
		n += w[i].allocs;
	}
	return bad ? -1 : n;
}
