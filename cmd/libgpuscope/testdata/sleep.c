// sleep runs a scope that sleeps through libgpuscope's entry points on the
// host device of 256 MiB (GPUSCOPE_HOST_MEMORY), as a framework's weights
// would: begun sleepable (a sleepable scope inside it is refused), its
// buffer written through its address, none of its blocks kept by the pair
// cache, ended with the buffer live (it stays open, no longer the
// thread's), put to sleep keeping its contents,
// its memory taken by another scope meanwhile (a wake then fails whole, out
// of memory), woken with the same bytes at the same address, put to sleep
// dropping them (it wakes as zeros), its buffer freed asleep (the memory it
// held is no longer the scope's to wake), an end with a buffer CuPy's form
// allocated in it still live (it stays open), and ended with
// GPUSCOPE_FREE_LIVE. It prints "ok" and exits 0 where every step did what
// gpuscope.h says. cmd/libgpuscope's TestScopesSleepFromC runs it.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuscope.h"

#define MiB (1 << 20)

static int failed(const char *what, int line) {
	char msg[4096];
	int kind = 0;
	gpuscope_last_error(msg, sizeof msg, &kind);
	fprintf(stderr, "line %d: %s (last error, kind %d: %s)\n", line, what, kind, msg);
	return 1;
}

#define CHECK(cond, what) \
	if (!(cond)) return failed(what, __LINE__)

static int holds(const unsigned char *p, size_t n, int zeros) {
	for (size_t i = 0; i < n; i++) {
		if (p[i] != (zeros ? 0 : (unsigned char)(i * 7 + i / 4096))) {
			return 0;
		}
	}
	return 1;
}

static long long figure(const char *key) {
	char buf[8192], want[64];
	gpuscope_stats(0, buf, sizeof buf);
	snprintf(want, sizeof want, "\"%s\":", key);
	const char *at = strstr(buf, want);
	return at ? atoll(at + strlen(want)) : -1;
}

// paired reports whether the pair cache served a block of 4 KiB freed and
// allocated again in the calling thread's scope.
static int paired(void) {
	long long hits = figure("c_pair_hits"); // before: reading the stats empties the cache
	void *a = gpuscope_alloc(4096, 0, NULL);
	gpuscope_free(a, 4096, 0, NULL);
	void *b = gpuscope_alloc(4096, 0, NULL);
	gpuscope_free(b, 4096, 0, NULL);
	return figure("c_pair_hits") > hits;
}

int main(void) {
	const size_t n = 96 * MiB;
	int64_t plain = gpuscope_scope_begin(0, "plain");
	CHECK(paired(), "the pair cache serves an ordinary scope's pair");
	CHECK(gpuscope_scope_end(plain, 0) == 0, "its end");
	int64_t s = gpuscope_scope_begin_flags(0, "weights", GPUSCOPE_SLEEPABLE);
	CHECK(s > 0, "gpuscope_scope_begin_flags");
	CHECK(!paired(), "the pair cache keeps no block of a sleepable scope: it could serve one asleep");
	unsigned char *p = gpuscope_alloc((ssize_t)n, 0, NULL);
	CHECK(p != NULL, "an allocation in the sleepable scope");
	for (size_t i = 0; i < n; i++) {
		p[i] = (unsigned char)(i * 7 + i / 4096);
	}
	CHECK(gpuscope_scope_begin_flags(0, "inner", GPUSCOPE_SLEEPABLE) < 0, "a sleepable scope inside a sleepable one is refused");
	CHECK(gpuscope_scope_end(s, 0) == 0, "its end with a buffer live: it stays open");
	char path[8192];
	gpuscope_stats(0, path, sizeof path);
	CHECK(strstr(path, "\"scope\":\"libgpuscope\"") != NULL, "... and is no longer the thread's");

	CHECK(gpuscope_scope_sleep(s, GPUSCOPE_KEEP_CONTENTS) == 0, "sleep, keeping the contents");
	CHECK(figure("sleeping") == (long long)n, "\"sleeping\" counts the buffer asleep");
	int64_t o = gpuscope_scope_begin(0, "other");
	void *q = gpuscope_alloc(200 * MiB, 0, NULL);
	CHECK(q != NULL, "another scope allocates the memory the sleeping one gave back");
	CHECK(gpuscope_scope_wake(s) < 0, "a wake with no room fails");
	int kind = 0;
	char msg[4096];
	gpuscope_last_error(msg, sizeof msg, &kind);
	CHECK(kind == GPUSCOPE_OUT_OF_MEMORY, "... for want of memory");
	gpuscope_free(q, 200 * MiB, 0, NULL);
	CHECK(gpuscope_scope_end(o, 0) == 0, "the other scope's end");
	CHECK(gpuscope_scope_wake(s) == 0, "the wake, once the memory is free");
	CHECK(holds(p, n, 0), "the same bytes at the same address");

	CHECK(gpuscope_scope_sleep(s, 0) == 0, "sleep, dropping the contents");
	CHECK(gpuscope_scope_wake(s) == 0, "wake");
	CHECK(holds(p, n, 1), "zeros where the contents were dropped");

	CHECK(gpuscope_scope_sleep(s, 2) < 0, "an unknown flag of sleep");
	CHECK(gpuscope_scope_begin_flags(0, "x", 4) < 0, "an unknown flag of begin");
	intptr_t c = gpuscope_cupy_malloc((intptr_t)s, 4096, 0);
	CHECK(c != 0, "CuPy's form allocates in the scope its param names");
	CHECK(gpuscope_scope_sleep(s, 0) == 0, "sleep");
	long long failures = figure("c_failures"), released = figure("sleeping_released");
	gpuscope_free(p, (ssize_t)n, 0, NULL);
	CHECK(figure("c_failures") == failures, "a free while asleep succeeds");
	CHECK(figure("sleeping") == 4096, "\"sleeping\" counts what is left");
	CHECK(figure("sleeping_released") < released, "the pages that held only the buffer freed are not the scope's to wake");
	gpuscope_free(p, (ssize_t)n, 0, NULL);
	CHECK(figure("c_failures") == failures + 1, "a second free fails");
	CHECK(gpuscope_scope_end(s, 0) == 0 && gpuscope_scope_wake(s) == 0, "an end with a buffer live leaves it open: it wakes");
	CHECK(gpuscope_scope_sleep(s, 0) == 0, "sleep");
	CHECK(gpuscope_scope_end(s, GPUSCOPE_FREE_LIVE) == 0, "the end asleep, freeing what it holds");
	CHECK(gpuscope_scope_wake(s) < 0, "a wake of a scope that ended");
	CHECK(figure("allocated") == 0 && figure("sleeping_scopes") == 0, "nothing left");
	printf("ok\n");
	return 0;
}
