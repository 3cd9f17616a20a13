// pair_bench measures an alloc+free pair through libgpuscope's PyTorch
// entry points, called from C, and prints ns per pair:
//
//	go build -buildmode=c-shared -o /tmp/lib/libgpuscope.so ./cmd/libgpuscope
//	gcc -O2 -I cmd/libgpuscope cmd/libgpuscope/testdata/pair_bench.c -o /tmp/lib/pair_bench -L/tmp/lib -lgpuscope -Wl,-rpath,/tmp/lib
//	/tmp/lib/pair_bench [pairs] [size] [device] [rounds]
//
// Each figure is timed in rounds of pairs calls; it prints the fastest
// round and the median, the fastest being the least disturbed by other
// work on the machine. Besides the pair, which the pair cache serves, it
// times pairs whose size alternates with another, which the cache never
// serves (every allocation crosses into Go, and frees there the block
// freed before), and a pair with 64 buffers live. GPUSCOPE_PAIR_CACHE=0
// times every pair through Go: two crossings.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpuscope.h"

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

enum { maxRounds = 64, live = 64 };

static long pairs;
static ssize_t size;
static int device;
static void *held[live];

static void pair(void) {
	for (long i = 0; i < pairs; i++) {
		void *p = gpuscope_alloc(size, device, NULL);
		gpuscope_free(p, size, device, NULL);
	}
}

static void alternating(void) {
	for (long i = 0; i < pairs; i++) {
		ssize_t n = size + (i & 1) * 512;
		void *p = gpuscope_alloc(n, device, NULL);
		gpuscope_free(p, n, device, NULL);
	}
}

static void pair_live(void) {
	for (long i = 0; i < pairs; i++) {
		int k = i % live;
		gpuscope_free(held[k], size, device, NULL);
		held[k] = gpuscope_alloc(size, device, NULL);
	}
}

// report times fn in rounds and prints the fastest and the median round,
// per call of its loop.
static void report(const char *what, void (*fn)(void), int rounds) {
	double t[maxRounds];
	for (int r = 0; r < rounds; r++) {
		double t0 = now();
		fn();
		t[r] = (now() - t0) / pairs;
	}
	qsort(t, rounds, sizeof t[0], cmp);
	printf("%-22s fastest %7.1f ns   median %7.1f ns\n", what, t[0], t[rounds / 2]);
}

int main(int argc, char **argv) {
	pairs = argc > 1 ? atol(argv[1]) : 200000;
	size = argc > 2 ? atol(argv[2]) : 4096;
	device = argc > 3 ? atoi(argv[3]) : 0;
	int rounds = argc > 4 ? atoi(argv[4]) : 10;
	if (rounds < 1 || rounds > maxRounds || pairs < 1) {
		fprintf(stderr, "pair_bench: 1 to %d rounds of at least one pair\n", maxRounds);
		return 2;
	}

	// Warm up: the device opens, the pool caches a block of the size.
	for (int i = 0; i < 1000; i++) {
		void *p = gpuscope_alloc(size, device, NULL);
		if (p == NULL) {
			fprintf(stderr, "pair_bench: alloc of %zd bytes on device %d failed\n", size, device);
			return 1;
		}
		gpuscope_free(p, size, device, NULL);
	}
	const char *cache = getenv("GPUSCOPE_PAIR_CACHE");
	printf("pair_bench: %ld calls a round, %d rounds, %zd bytes, device %d, pair cache %s\n", pairs, rounds, size, device,
	       cache != NULL && strcmp(cache, "0") == 0 ? "off" : "on");
	report("alloc+free pair", pair, rounds);
	report("sizes alternating", alternating, rounds);
	for (int k = 0; k < live; k++) {
		held[k] = gpuscope_alloc(size, device, NULL);
	}
	report("pair with 64 live", pair_live, rounds);
	for (int k = 0; k < live; k++) {
		gpuscope_free(held[k], size, device, NULL);
	}
	return 0;
}
