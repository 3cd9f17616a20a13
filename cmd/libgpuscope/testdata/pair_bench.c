// pair_bench measures an alloc+free pair through libgpuscope's PyTorch
// entry points, called from C, and prints ns per pair:
//
//	go build -buildmode=c-shared -o /tmp/lib/libgpuscope.so ./cmd/libgpuscope
//	gcc -O2 -I cmd/libgpuscope cmd/libgpuscope/testdata/pair_bench.c -o /tmp/lib/pair_bench \
//	    -L/tmp/lib -lgpuscope -Wl,-rpath,/tmp/lib
//	/tmp/lib/pair_bench [pairs] [size] [device]
//
// It also times an empty call into the library (gpuscope_free(NULL)), the
// crossing into Go that every call pays, and a pair with 64 buffers live.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gpuscope.h"

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
	long pairs = argc > 1 ? atol(argv[1]) : 1000000;
	ssize_t size = argc > 2 ? atol(argv[2]) : 4096;
	int device = argc > 3 ? atoi(argv[3]) : 0;

	// Warm up: the device opens, the pool caches a block of the size.
	for (int i = 0; i < 1000; i++) {
		void *p = gpuscope_alloc(size, device, NULL);
		if (p == NULL) {
			fprintf(stderr, "pair_bench: alloc of %zd bytes on device %d failed\n", size, device);
			return 1;
		}
		gpuscope_free(p, size, device, NULL);
	}

	double t0 = now();
	for (long i = 0; i < pairs; i++) {
		void *p = gpuscope_alloc(size, device, NULL);
		gpuscope_free(p, size, device, NULL);
	}
	double t1 = now();
	for (long i = 0; i < pairs; i++) {
		gpuscope_free(NULL, 0, device, NULL);
	}
	double t2 = now();

	enum { live = 64 };
	void *held[live];
	for (int k = 0; k < live; k++) {
		held[k] = gpuscope_alloc(size, device, NULL);
	}
	double t3 = now();
	for (long i = 0; i < pairs; i++) {
		int k = i % live;
		gpuscope_free(held[k], size, device, NULL);
		held[k] = gpuscope_alloc(size, device, NULL);
	}
	double t4 = now();
	for (int k = 0; k < live; k++) {
		gpuscope_free(held[k], size, device, NULL);
	}

	printf("pair %.1f ns  (alloc+free of %zd bytes, device %d, %ld pairs)\n", (t1 - t0) / pairs, size, device, pairs);
	printf("empty call %.1f ns  (gpuscope_free(NULL))\n", (t2 - t1) / pairs);
	printf("pair with %d live %.1f ns\n", live, (t4 - t3) / pairs);
	return 0;
}
