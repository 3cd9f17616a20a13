// Pairs timed on a thread Go did not make, as a library's thread calls:
// BenchmarkCPair's loop.
#include <pthread.h>
#include <stddef.h>

#include "gpuscope.h"

struct pairs_args {
	long n;
	ssize_t size;
	int failed;
};

static void *pairs_thread(void *p) {
	struct pairs_args *a = p;
	for (long i = 0; i < a->n; i++) {
		void *ptr = gpuscope_alloc(a->size, 0, NULL);
		if (ptr == NULL) {
			a->failed = 1;
			return NULL;
		}
		gpuscope_free(ptr, a->size, 0, NULL);
	}
	return NULL;
}

// c_pairs makes n alloc+free pairs of size bytes on device 0 from a new
// thread, and returns 0, or -1 where an allocation failed.
int c_pairs(long n, long size) {
	struct pairs_args a = {n, (ssize_t)size, 0};
	pthread_t t;
	if (pthread_create(&t, NULL, pairs_thread, &a) != 0) {
		return -1;
	}
	pthread_join(t, NULL);
	return a.failed ? -1 : 0;
}
