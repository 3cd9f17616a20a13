// cthreads calls libgpuscope's entry points from C, on the host device,
// from threads that Go did not make: good calls, bad calls, scopes, and
// many threads at once. It prints what failed and exits 1 if anything did.
// cmd/libgpuscope's tests build and run it (TestCThreads).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuscope.h"

static int failures;

#define CHECK(cond, ...)                                        \
	do {                                                    \
		if (!(cond)) {                                  \
			failures++;                             \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__);                    \
			printf("\n");                           \
		}                                               \
	} while (0)

static char text[1 << 16];

// stat returns the number after "key": in device 0's stats.
static long long stat(const char *key) {
	size_t n = gpuscope_stats(0, text, sizeof text);
	if (n >= sizeof text) {
		printf("FAIL: stats of %zu bytes\n", n);
		exit(1);
	}
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	char *p = strstr(text, pat);
	if (p == NULL) {
		printf("FAIL: no %s in %s\n", key, text);
		exit(1);
	}
	return atoll(p + strlen(pat));
}

static const char *summary(void) {
	gpuscope_summary(0, text, sizeof text);
	return text;
}

static void good_calls(void) {
	long long before = stat("c_failures");
	void *p = gpuscope_alloc(1000, 0, NULL);
	CHECK(p != NULL, "alloc of 1000 bytes failed");
	CHECK(((uintptr_t)p & 255) == 0, "%p is not aligned to 256 bytes", p);
	CHECK(stat("active_blocks") == 1, "one buffer live, stats say %lld", stat("active_blocks"));
	gpuscope_free(p, 1000, 0, NULL);
	CHECK(stat("active_blocks") == 0, "none live after free, stats say %lld", stat("active_blocks"));

	intptr_t q = gpuscope_cupy_malloc(0, 4096, 0);
	CHECK(q != 0, "cupy malloc failed");
	gpuscope_cupy_free(0, q, 0);
	CHECK(stat("active_blocks") == 0, "none live after cupy free");
	CHECK(stat("c_failures") == before, "good calls counted as failures: %s", text);

	// snprintf's convention: the length it needs, whatever fits.
	char small[8];
	size_t n = gpuscope_stats(0, small, sizeof small);
	CHECK(n > sizeof small && strlen(small) == sizeof small - 1, "stats into 8 bytes: %zu, %s", n, small);
	CHECK(gpuscope_summary(0, NULL, 0) > 0, "summary's length");
}

static void bad_calls(void) {
	long long before = stat("c_failures");
	void *live = gpuscope_alloc(512, 0, NULL);
	CHECK(live != NULL, "alloc failed");

	static char never[1024];
	gpuscope_free(never, 1024, 0, NULL); // a pointer the library never got
	gpuscope_free((char *)live + 256, 256, 0, NULL); // inside a live allocation
	gpuscope_free(live, 4096, 0, NULL); // the wrong size: not freed
	gpuscope_free(live, 512, 3, NULL); // a device that does not exist
	gpuscope_cupy_free(0, (intptr_t)never, 0);
	CHECK(stat("active_blocks") == 1, "a bad free freed something: %s", text);
	CHECK(stat("c_failures") == before + 5, "5 bad frees, %lld failures counted", stat("c_failures") - before);
	CHECK(strstr(text, "is no live allocation of this library: an address it never returned") != NULL &&
		      strstr(text, "already freed") == NULL,
	      "a pointer never given reads as freed: %s", text);

	gpuscope_free(live, 512, 0, NULL);
	gpuscope_free(live, 512, 0, NULL); // a double free
	CHECK(stat("active_blocks") == 0, "the good free did not free");
	CHECK(stat("c_failures") == before + 6, "the double free is not counted");
	CHECK(strstr(text, "or one freed already") != NULL, "the double free is not named: %s", text);
	gpuscope_free(NULL, 0, 0, NULL); // free(NULL) does nothing

	// Size 0 is NULL, quietly, as c10's allocator gives it: no failure.
	before = stat("c_failures");
	CHECK(gpuscope_alloc(0, 0, NULL) == NULL, "size 0 allocated");
	CHECK(gpuscope_alloc(0, 0, (void *)0x1234) == NULL, "size 0 on a stream allocated");
	CHECK(gpuscope_cupy_malloc(0, 0, 0) == 0, "cupy size 0 allocated");
	CHECK(stat("c_failures") == before, "size 0 counted as %lld failures: %s", stat("c_failures") - before, text);

	before = stat("c_failures");
	CHECK(gpuscope_alloc(-1, 0, NULL) == NULL, "size -1 allocated");
	CHECK(gpuscope_alloc((ssize_t)1 << 40, 0, NULL) == NULL, "1 TiB allocated on the host device");
	CHECK(gpuscope_alloc(512, 7, NULL) == NULL, "device 7 allocated");
	CHECK(gpuscope_alloc(512, -1, NULL) == NULL, "device -1 allocated");
	CHECK(gpuscope_cupy_malloc(0, (size_t)-1, 0) == 0, "SIZE_MAX allocated");
	CHECK(gpuscope_cupy_malloc(12345, 512, 0) == 0, "a scope that never was allocated");
	CHECK(gpuscope_scope_begin(9, "x") < 0, "a scope on device 9");
	CHECK(gpuscope_scope_end(12345, 0) < 0, "a scope that never was ended");
	CHECK(gpuscope_set_max_reserved(5, 1 << 20) < 0, "a cap on device 5");
	CHECK(stat("c_failures") == before + 9, "9 bad calls, %lld failures counted", stat("c_failures") - before);
	CHECK(stat("active_blocks") == 0, "a bad call left memory live");
}

static void scopes(void) {
	int64_t outer = gpuscope_scope_begin(0, "outer");
	CHECK(outer > 0, "begin outer: %lld", (long long)outer);
	void *a = gpuscope_alloc(2048, 0, NULL);
	int64_t inner = gpuscope_scope_begin(0, "inner");
	CHECK(inner > 0, "begin inner");
	void *b = gpuscope_alloc(4096, 0, NULL);
	void *c = gpuscope_alloc(8192, 0, NULL);
	CHECK(strstr(summary(), "inner") != NULL, "the summary does not show inner:\n%s", text);
	gpuscope_free(c, 8192, 0, NULL);

	CHECK(gpuscope_scope_end(outer, 0) < 0, "outer ended with inner open");
	CHECK(gpuscope_scope_end(inner, 0) == 0, "end inner");
	CHECK(gpuscope_scope_end(inner, 0) < 0, "inner ended twice");
	CHECK(stat("active_blocks") == 2, "end of inner freed b: %s", text);
	CHECK(strstr(text, "passed to") != NULL, "the end does not report what passed on: %s", text);
	CHECK(strstr(summary(), "inner") == NULL, "inner is still in the summary");
	gpuscope_free(b, 4096, 0, NULL); // now outer's
	CHECK(stat("active_blocks") == 1, "b not freed through its new scope");

	// The caller says the library is done: what it holds is freed.
	void *d = gpuscope_alloc(512, 0, NULL);
	CHECK(gpuscope_scope_end(outer, GPUSCOPE_FREE_LIVE) == 0, "end outer");
	CHECK(stat("active_blocks") == 0, "outer's end with GPUSCOPE_FREE_LIVE left memory live");
	long long before = stat("c_failures");
	gpuscope_free(a, 2048, 0, NULL); // freed by its scope's end
	gpuscope_free(d, 512, 0, NULL);
	CHECK(stat("c_failures") == before + 2, "frees after the scope freed them were not refused");

	// CuPy's param names a scope: each framework in its own.
	int64_t cupy = gpuscope_scope_begin(0, "cupy");
	int64_t torch = gpuscope_scope_begin(0, "torch");
	intptr_t q = gpuscope_cupy_malloc(cupy, 1 << 20, 0);
	void *t = gpuscope_alloc(1 << 20, 0, NULL);
	summary();
	CHECK(q != 0 && t != NULL, "cupy and torch allocations");
	CHECK(strstr(text, "cupy") && strstr(text, "torch"), "the summary misses a framework:\n%s", text);
	gpuscope_free(t, 1 << 20, 0, NULL);
	CHECK(gpuscope_scope_end(torch, 0) == 0, "end torch");
	gpuscope_cupy_free(cupy, q, 0);
	CHECK(gpuscope_scope_end(cupy, 0) == 0, "end cupy");
	CHECK(stat("active_blocks") == 0, "cupy and torch left memory live");

	// A cap below one page (2 MiB here) could never hold an allocation; an
	// allocation past a cap advises C's call to raise it.
	CHECK(gpuscope_set_max_reserved(0, 1000) < 0, "a cap below one page");
	stat("c_failures");
	CHECK(strstr(text, "below one page of 2.00 MiB") != NULL, "why the cap was refused: %s", text);
	char msg[4096];
	int kind = -1;
	gpuscope_last_error(msg, sizeof msg, &kind);
	CHECK(kind == GPUSCOPE_INVALID_SIZE, "a cap below one page is of kind %d: %s", kind, msg);
	CHECK(gpuscope_set_max_reserved(0, 2 << 20) == 0, "cap");
	CHECK(gpuscope_alloc(4 << 20, 0, NULL) == NULL, "allocated past the cap");
	stat("c_failures");
	CHECK(strstr(text, "raise it with gpuscope_set_max_reserved;") != NULL, "the error advises the C call: %s", text);
	// A binding names the call as its users write it.
	CHECK(gpuscope_name_call("gpuscope_set_max_reserved", "gpuscope.set_max_reserved") == 0, "name the call");
	CHECK(gpuscope_alloc(4 << 20, 0, NULL) == NULL, "allocated past the cap");
	gpuscope_last_error(msg, sizeof msg, &kind);
	CHECK(strstr(msg, "raise it with gpuscope.set_max_reserved;") != NULL, "the error advises the binding's call: %s", msg);
	CHECK(gpuscope_name_call("gpuscope_set_max_reserved", NULL) == 0, "the C name back");
	CHECK(gpuscope_name_call("gpuscope_alloc", "x") < 0, "a call no message advises");
	CHECK(gpuscope_set_max_reserved(0, 0) == 0, "uncap");
}

// A stream handle for the odd threads: the host device takes any handle
// as a stream's (allocations for it go to a child scope on it).
#define STREAM ((void *)(uintptr_t)0x5000)
#define OTHER ((void *)(uintptr_t)0x6000) // the pair cache's record_stream

// pair_cache_keeps: the cache keeps its blocks across allocations it does
// not serve where they raise no peak and the pool could not serve them from
// those blocks, evicts the oldest for a newer one, serves CuPy's pairs too,
// and tracks every allocation however many are live.
static void pair_cache_keeps(void) {
	long long before = stat("c_failures");
	void *big = gpuscope_alloc(1 << 20, 0, NULL); // a peak that what follows stays under
	gpuscope_free(big, 1 << 20, 0, NULL);
	stat("active_blocks"); // the cache gives back what it holds
	long long hits = stat("c_pair_hits");
	void *a = gpuscope_alloc(4096, 0, NULL);
	gpuscope_free(a, 4096, 0, NULL);
	void *b = gpuscope_alloc(16384, 0, NULL); // not served, and too large for a: a stays
	void *a2 = gpuscope_alloc(4096, 0, NULL);
	CHECK(a2 == a, "a block left the cache at an allocation it did not serve");
	gpuscope_free(a2, 4096, 0, NULL);
	gpuscope_free(b, 16384, 0, NULL);
	CHECK(stat("c_pair_hits") == hits + 1, "hits: %s", text);

	// The newest blocks stay: 40 freed, the first 8 evicted.
	enum { n = 40 };
	void *p[n];
	hits = stat("c_pair_hits"); // which gives back what the cache holds
	for (int k = 0; k < n; k++) {
		p[k] = gpuscope_alloc(512 * (k + 1), 0, NULL);
	}
	for (int k = 0; k < n; k++) {
		gpuscope_free(p[k], 512 * (k + 1), 0, NULL);
	}
	for (int k = n - 1; k >= 0; k--) { // the larger first: a miss gives back the larger blocks of its class
		p[k] = gpuscope_alloc(512 * (k + 1), 0, NULL);
	}
	CHECK(stat("c_pair_hits") == hits + (n - 8), "the 32 newest were not served: %lld hits of %d", stat("c_pair_hits") - hits, n - 8);
	for (int k = 0; k < n; k++) {
		gpuscope_free(p[k], 512 * (k + 1), 0, NULL);
	}

	// CuPy's pair, freed without a size, is served too.
	hits = stat("c_pair_hits");
	intptr_t q = gpuscope_cupy_malloc(0, 3 << 10, 0);
	gpuscope_cupy_free(0, q, 0);
	CHECK(gpuscope_cupy_malloc(0, 3 << 10, 0) == q, "CuPy's freed block did not serve its next allocation");
	gpuscope_cupy_free(0, q, 0);
	CHECK(stat("c_pair_hits") == hits + 1, "CuPy's pair was not the cache's: %s", text);

	// No limit on what the table tracks: the newest of 4,500 blocks freed
	// is the one the cache serves (the table tracked 4,096 at most).
	enum { many = 4500 };
	static void *m[many];
	for (int k = 0; k < many; k++) {
		m[k] = gpuscope_alloc(512, 0, NULL);
	}
	for (int k = 0; k < many; k++) {
		gpuscope_free(m[k], 512, 0, NULL);
	}
	void *last = gpuscope_alloc(512, 0, NULL);
	CHECK(last == m[many - 1], "the newest block freed was not tracked: %p, not %p", last, m[many - 1]);
	gpuscope_free(last, 512, 0, NULL);
	CHECK(stat("active_blocks") == 0, "blocks live: %s", text);
	CHECK(stat("c_failures") == before, "failures: %s", text);
}

// The pair cache: a pair of a size freed before is served on the C side,
// and what the cache keeps is memory the library freed, never a scope's
// live memory, nor anything the figures or the pool's pressure miss.
static void pair_cache(void) {
	long long hits = stat("c_pair_hits"), before = stat("c_failures");
	void *p = gpuscope_alloc(3000, 0, NULL);
	gpuscope_free(p, 3000, 0, NULL);
	void *q = gpuscope_alloc(3000, 0, NULL);
	CHECK(q == p, "the freed block did not serve the next allocation of its size");
	CHECK(stat("c_pair_hits") == hits + 1, "the pair was not the pair cache's: %s", text);
	CHECK(stat("active_blocks") == 1, "one live: %s", text);
	gpuscope_free(q, 3000, 0, NULL);
	CHECK(stat("active_blocks") == 0, "a block the library freed is live when the stats are read: %s", text);

	// The peak is what the library held at once: a freed block goes back
	// before an allocation the cache does not serve.
	void *a = gpuscope_alloc(64 << 20, 0, NULL);
	gpuscope_free(a, 64 << 20, 0, NULL);
	void *b = gpuscope_alloc(96 << 20, 0, NULL);
	CHECK(b != NULL, "alloc of 96 MiB");
	CHECK(stat("peak_allocated") < (160 << 20), "peak %lld: the freed 64 MiB counted", stat("peak_allocated"));
	gpuscope_free(b, 96 << 20, 0, NULL);

	// A scope begun serves no block of the enclosing scope's.
	void *r = gpuscope_alloc(5000, 0, NULL);
	gpuscope_free(r, 5000, 0, NULL);
	int64_t s = gpuscope_scope_begin(0, "pairs");
	void *x = gpuscope_alloc(5000, 0, NULL);
	CHECK(gpuscope_scope_end(s, 0) == 0, "end pairs");
	stat("active_blocks");
	CHECK(strstr(text, "pairs\\\" ended with 1 buffer") != NULL, "the block allocated in pairs was not its: %s", text);
	gpuscope_free(x, 5000, 0, NULL); // passed to the root
	CHECK(stat("active_blocks") == 0, "x not freed");

	// A block in the cache is freed: every call that names it fails, and
	// it is freed once.
	void *y = gpuscope_alloc(6000, 0, NULL);
	gpuscope_free(y, 6000, 0, NULL);
	gpuscope_cupy_free(0, (intptr_t)y, 0);
	gpuscope_record_stream(y, OTHER);
	gpuscope_free(y, 6000, 0, NULL);
	void *y1 = gpuscope_alloc(6000, 0, NULL), *y2 = gpuscope_alloc(6000, 0, NULL);
	CHECK(y1 != y2, "one block handed out twice");
	gpuscope_free(y1, 6000, 0, NULL);
	gpuscope_free(y2, 6000, 0, NULL);
	CHECK(stat("c_failures") == before + 3, "3 calls on a freed block, %lld failures: %s", stat("c_failures") - before, text);
	CHECK(strstr(text, "was freed already (a second free, or a use after the free)") != NULL, "a block the pair cache holds reads as freed: %s", text);
	CHECK(stat("active_blocks") == 0, "y live");

	// A block that work on another stream uses is never cached
	// (record_stream): the pool reuses it once that work is done.
	hits = stat("c_pair_hits");
	void *z = gpuscope_alloc(7000, 0, NULL);
	gpuscope_record_stream(z, OTHER);
	gpuscope_free(z, 7000, 0, NULL);
	gpuscope_free(gpuscope_alloc(7000, 0, NULL), 7000, 0, NULL);
	CHECK(stat("c_pair_hits") == hits, "a block recorded on another stream was cached");

	// Under a cap, what the cache holds makes room for an allocation it
	// does not serve: here CuPy's, of another size.
	CHECK(gpuscope_set_max_reserved(0, 8 << 20) == 0, "cap");
	void *c = gpuscope_alloc(6 << 20, 0, NULL);
	CHECK(c != NULL, "6 MiB under an 8 MiB cap");
	gpuscope_free(c, 6 << 20, 0, NULL);
	intptr_t k = gpuscope_cupy_malloc(0, 7 << 20, 0);
	CHECK(k != 0, "the freed 6 MiB in the cache kept 7 MiB from fitting under the cap: %s", text);
	gpuscope_cupy_free(0, k, 0);
	CHECK(gpuscope_set_max_reserved(0, 0) == 0, "uncap");
	CHECK(stat("c_failures") == before + 3, "failures: %s", text);
	pair_cache_keeps();
}

// live returns the live bytes of scope (its children's with them), -1
// where it is not open.
static long long live(int64_t scope) {
	char buf[1024];
	if (gpuscope_scope_stats(scope, buf, sizeof buf) == 0) {
		return -1;
	}
	char *p = strstr(buf, "\"live\":");
	return p == NULL ? -2 : atoll(p + 7);
}

// begin_sibling begins a scope on a thread of its own, which leaves it
// open: a sibling of the caller's scopes.
static void *begin_sibling(void *arg) {
	*(int64_t *)arg = gpuscope_scope_begin(0, "other");
	return NULL;
}

static void *end_elsewhere(void *arg) {
	CHECK(gpuscope_scope_end(*(int64_t *)arg, 0) == 0, "end from another thread");
	return NULL;
}

// A request of a server's: a thread begins its own scope, allocates, waits
// until every request is open, checks that its scope holds exactly what
// it allocated (nothing charged across) and that its thread's scope is its
// own, then frees and ends, each thread in its own order.
enum { requests = 4 };
static pthread_barrier_t open_together;

static void *request(void *arg) {
	int i = (int)(uintptr_t)arg;
	char name[32], want[64], buf[4096];
	snprintf(name, sizeof name, "req%d", i);
	int64_t s = gpuscope_scope_begin(0, name);
	CHECK(s > 0, "begin %s", name);
	ssize_t size = (i + 1) << 20;
	void *p = gpuscope_alloc(size, 0, NULL);
	void *q = gpuscope_alloc(4096, 0, STREAM); // its child on the stream
	pthread_barrier_wait(&open_together);
	CHECK(live(s) == size + 4096, "%s holds %lld bytes, not its own %zd", name, live(s), size + 4096);
	gpuscope_stats(0, buf, sizeof buf);
	snprintf(want, sizeof want, "\"scope\":\"libgpuscope/%s\"", name);
	CHECK(strstr(buf, want) != NULL, "%s's thread is not in it: %s", name, buf);
	pthread_barrier_wait(&open_together);
	gpuscope_free(p, size, 0, NULL);
	gpuscope_free(q, 4096, 0, STREAM);
	CHECK(gpuscope_scope_end(s, 0) == 0, "end %s while its siblings are open", name);
	return NULL;
}

// A thread with no scope allocates for a stream bound to a scope in it
// (PyTorch's autograd thread), and for another stream in the root.
static void *scopeless(void *arg) {
	void **out = arg;
	out[0] = gpuscope_alloc(8192, 0, STREAM);
	out[1] = gpuscope_alloc(8192, 0, NULL);
	return NULL;
}

static void thread_scopes(void) {
	long long before = stat("c_failures");
	int64_t mine = gpuscope_scope_begin(0, "main");
	pthread_t t[requests];
	pthread_barrier_init(&open_together, NULL, requests);
	for (int i = 0; i < requests; i++) {
		pthread_create(&t[i], NULL, request, (void *)(uintptr_t)i);
	}
	for (int i = 0; i < requests; i++) {
		pthread_join(t[i], NULL);
	}
	pthread_barrier_destroy(&open_together);
	CHECK(live(mine) == 0, "the requests' memory was charged to main's scope: %lld", live(mine));
	CHECK(strstr(summary(), "req") == NULL, "a request's scope is left:\n%s", text);

	CHECK(gpuscope_scope_bind(mine, STREAM) == 0, "bind");
	int64_t other = 0;
	pthread_t th;
	pthread_create(&th, NULL, begin_sibling, &other);
	pthread_join(th, NULL);
	CHECK(other > 0 && gpuscope_scope_bind(other, STREAM) < 0, "a stream bound to two open sibling scopes");
	void *got[2];
	pthread_create(&th, NULL, scopeless, got);
	pthread_join(th, NULL);
	CHECK(live(mine) == 8192, "the bound stream's allocation is not in main's scope: %lld", live(mine));
	CHECK(live(other) == 0, "other holds %lld", live(other));
	CHECK(stat("active_blocks") == 2, "two live: %s", text);
	gpuscope_free(got[0], 8192, 0, STREAM);
	gpuscope_free(got[1], 8192, 0, NULL);
	// A scope inside the bound one binds the stream over it, until it ends.
	int64_t inner = gpuscope_scope_begin(0, "inner");
	CHECK(gpuscope_scope_bind(inner, STREAM) == 0, "a scope inside the bound one binds its stream");
	pthread_create(&th, NULL, scopeless, got);
	pthread_join(th, NULL);
	CHECK(live(inner) == 8192 && live(mine) == 8192, "the stream's allocation is not inner's: %lld", live(inner));
	gpuscope_free(got[0], 8192, 0, STREAM);
	gpuscope_free(got[1], 8192, 0, NULL);
	CHECK(gpuscope_scope_end(inner, 0) == 0, "end inner");
	pthread_create(&th, NULL, scopeless, got);
	pthread_join(th, NULL);
	CHECK(live(mine) == 8192, "the stream is not main's scope's again: %lld", live(mine));
	gpuscope_free(got[0], 8192, 0, STREAM);
	gpuscope_free(got[1], 8192, 0, NULL);
	// The end of scope 0, which is no scope, fails and leaves the bindings
	// as they were: it forgot every free one as a binding of 0, and the
	// device's count of bindings went below zero, hiding the stream's.
	CHECK(gpuscope_scope_end(0, 0) != 0, "scope 0 ended");
	pthread_create(&th, NULL, scopeless, got);
	pthread_join(th, NULL);
	CHECK(live(mine) == 8192, "after an end of scope 0 the stream is not main's scope's: %lld", live(mine));
	gpuscope_free(got[0], 8192, 0, STREAM);
	gpuscope_free(got[1], 8192, 0, NULL);
	CHECK(gpuscope_scope_end(other, 0) == 0, "end other");
	CHECK(gpuscope_scope_end(mine, 0) == 0, "end main");
	int64_t again = gpuscope_scope_begin(0, "again");
	CHECK(gpuscope_scope_bind(again, STREAM) == 0, "the stream of a scope that ended is free");
	CHECK(gpuscope_scope_end(again, 0) == 0, "end again");
	CHECK(stat("c_failures") == before + 2, "failures: %s", text);

	// A scope ended by another thread: its thread allocates in the root.
	int64_t s = gpuscope_scope_begin(0, "ended-elsewhere");
	pthread_create(&th, NULL, end_elsewhere, &s);
	pthread_join(th, NULL);
	void *p = gpuscope_alloc(512, 0, NULL);
	CHECK(p != NULL, "an allocation after the thread's scope ended elsewhere");
	gpuscope_stats(0, text, sizeof text);
	CHECK(strstr(text, "\"scope\":\"libgpuscope\"") != NULL, "not in the root: %s", text);
	gpuscope_free(p, 512, 0, NULL);
	CHECK(stat("c_failures") == before + 2, "failures: %s", text);

	// The thread's last failure, and whether it was for want of memory.
	char msg[4096];
	int kind = -1;
	CHECK(gpuscope_set_max_reserved(0, 2 << 20) == 0, "cap");
	CHECK(gpuscope_alloc(4 << 20, 0, NULL) == NULL, "allocated past the cap");
	CHECK(gpuscope_last_error(msg, sizeof msg, &kind) > 0 && kind == GPUSCOPE_OUT_OF_MEMORY, "kind %d: %s", kind, msg);
	CHECK(strstr(msg, "cap") != NULL, "the message does not name the cap: %s", msg);
	CHECK(gpuscope_set_max_reserved(0, 0) == 0, "uncap");
	gpuscope_free(msg, 1, 0, NULL);
	gpuscope_last_error(msg, sizeof msg, &kind);
	CHECK(kind == GPUSCOPE_FAILED && strstr(msg, "is no live allocation") != NULL, "kind %d: %s", kind, msg);
}

enum { threads = 8, rounds = 2000, held = 16 };

static void *worker(void *arg) {
	unsigned seed = (unsigned)(uintptr_t)arg;
	void *stream = seed % 2 ? STREAM : NULL;
	void *ptrs[held] = {0};
	ssize_t sizes[held] = {0};
	for (int i = 0; i < rounds; i++) {
		int k = rand_r(&seed) % held;
		if (ptrs[k] != NULL) {
			gpuscope_free(ptrs[k], sizes[k], 0, stream);
		}
		// Threads 1-4 repeat a few sizes, which the pair cache serves.
		sizes[k] = (uintptr_t)arg <= 4 ? 512 << rand_r(&seed) % 4 : 1 + rand_r(&seed) % (64 << 10);
		ptrs[k] = gpuscope_alloc(sizes[k], 0, stream);
		if (ptrs[k] == NULL) {
			printf("FAIL: thread %u: alloc of %zd failed\n", (unsigned)(uintptr_t)arg, sizes[k]);
			__atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
			return NULL;
		}
		if (i % 97 == 0) {
			char buf[256];
			gpuscope_stats(0, buf, sizeof buf);
		}
	}
	for (int k = 0; k < held; k++) {
		gpuscope_free(ptrs[k], sizes[k], 0, stream);
	}
	return NULL;
}

// Threads allocate and free, on the default stream and another, while
// scopes begin and end under them: what a thread allocated in an ended
// scope passes to the enclosing one, and its free finds it there.
static void many_threads(void) {
	long long before = stat("c_failures");
	pthread_t t[threads];
	for (int i = 0; i < threads; i++) {
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	}
	for (int i = 0; i < 200; i++) {
		int64_t s = gpuscope_scope_begin(0, "churn");
		int64_t s2 = gpuscope_scope_begin(0, "churn-inner");
		CHECK(s > 0 && s2 > 0, "begin during the threads' work");
		CHECK(gpuscope_scope_end(s2, 0) == 0, "end during the threads' work");
		CHECK(gpuscope_scope_end(s, 0) == 0, "end during the threads' work");
	}
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
	}
	CHECK(stat("active_blocks") == 0, "threads left memory live: %s", text);
	CHECK(stat("c_failures") == before, "calls of the threads failed: %s", text);
	CHECK(strstr(summary(), "churn") == NULL, "scopes left open:\n%s", text);
}

static volatile int stop_readers;

static void *reader(void *arg) {
	(void)arg;
	char buf[4096];
	while (!__atomic_load_n(&stop_readers, __ATOMIC_ACQUIRE)) {
		gpuscope_stats(0, buf, sizeof buf);
		gpuscope_summary(0, buf, sizeof buf);
	}
	return NULL;
}

// owned_once: while threads read the figures, which has the cache hand back
// what it holds, scopes whose blocks the cache holds end freeing what they
// hold, and their addresses go to new allocations, which stay their
// owners': each is written, read back and freed without a failure (a late
// hand-back that freed a block by its address alone freed them under their
// owner, and their free failed).
static void owned_once(void) {
	long long before = stat("c_failures");
	enum { readers = 2, rounds = 3000 };
	pthread_t t[readers];
	stop_readers = 0;
	for (int i = 0; i < readers; i++) {
		pthread_create(&t[i], NULL, reader, NULL);
	}
	for (int i = 0; i < rounds; i++) {
		int64_t s = gpuscope_scope_begin(0, "owned");
		void *p = gpuscope_alloc(4096, 0, NULL);
		gpuscope_free(p, 4096, 0, NULL); // into the cache
		void *q = gpuscope_alloc(8192, 0, NULL);
		gpuscope_free(q, 8192, 0, NULL);
		CHECK(gpuscope_scope_end(s, GPUSCOPE_FREE_LIVE) == 0, "end");
		unsigned char *r = gpuscope_alloc(4096, 0, NULL); // as likely as not at p's address
		memset(r, i & 0xff, 4096);
		for (int k = 0; k < 4096; k += 512) {
			CHECK(r[k] == (i & 0xff), "round %d: a block written by another owner", i);
		}
		gpuscope_free(r, 4096, 0, NULL);
	}
	__atomic_store_n(&stop_readers, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < readers; i++) {
		pthread_join(t[i], NULL);
	}
	CHECK(stat("c_failures") == before, "a block freed under its owner: %s", text);
	CHECK(stat("active_blocks") == 0, "blocks live: %s", text);
}

int main(void) {
	good_calls();
	bad_calls();
	pair_cache();
	scopes();
	thread_scopes();
	many_threads();
	owned_once();
	if (failures > 0) {
		printf("%d checks failed\n", failures);
	} else {
		printf("ok\n");
	}
	fflush(stdout); // where Go's test runs it, the process exits without C's flush
	return failures > 0;
}
