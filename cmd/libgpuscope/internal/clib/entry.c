// The exported names of the library: each converts its arguments and calls
// one Go function (entry.go), a single crossing into Go, unless the pair
// cache (paircache.c) serves it: an allocation of a size the library freed
// before, and a free the cache keeps, cross not at all. A call that allocates or begins a scope
// names the scope it is for, as scopes.c keeps them per thread and stream;
// where Go says that scope has ended, the call forgets it and asks again.
// In the child of a fork every call fails at once (gs_forked).
#include <stdio.h>

#include "gpuscope.h" // cmd/libgpuscope's, by the -I of entry.go
#include "paircache.h"
#include "scopes.h"
#include "_cgo_export.h"

// tracked has the pair cache's table track p, of id id, which Go allocated
// in scope, and returns 1; 0 where the scope's end, which came between,
// freed it: the caller, which has not handed it out, allocates again. Go
// says which scope holds it now, and whether the end freed it.
static int tracked(int device, uintptr_t p, ssize_t size, uintptr_t stream, int64_t scope, uint64_t id) {
	while (pc_track(device, p, size, stream, scope, id) == PC_ENDED) {
		int64_t now = gpuscopeGoSettle(p, id);
		if (now < 0) {
			return 0;
		}
		if (now == scope) {
			break; // open to Go and not to the cache: its free crosses into Go
		}
		scope = now;
	}
	return 1;
}

static inline __attribute__((always_inline)) void *allocFor(ssize_t size, int device, uintptr_t stream);
static inline __attribute__((always_inline)) void freeFor(uintptr_t ptr, ssize_t size, int device, uintptr_t stream);

void *gpuscope_alloc(ssize_t size, int device, void *stream) {
	if (gs_forked("gpuscope_alloc")) {
		return NULL;
	}
	if (size == 0) {
		return NULL; // quietly, as c10's allocator does (entry.go)
	}
	return allocFor(size, device, (uintptr_t)stream);
}

// allocFor allocates size bytes, not 0, on device for stream, in the
// calling thread's scope or the one stream is bound to: gpuscope_alloc,
// and gpuscope_cupy_stream_malloc.
static inline void *allocFor(ssize_t size, int device, uintptr_t stream) {
	for (;;) {
		int64_t scope = gs_scope_of(device, stream);
		pc_block out[PC_RELEASED];
		int nout, ncached;
		void *ptr = pc_alloc(device, scope, size, stream, out, &nout, &ncached);
		if (ptr != NULL) {
			return ptr;
		}
		int ended = 0;
		uint64_t id = 0;
		uintptr_t p = gpuscopeGoAlloc(size, device, stream, scope, out, nout, ncached, &id, &ended);
		if (!ended || scope == 0) {
			if (tracked(device, p, size, stream, scope, id)) {
				return (void *)p;
			}
			if (scope == 0) {
				continue; // never the root's
			}
		}
		gs_forget(scope);
	}
}

// freed is what the frees do where the pair cache kept ptr (PC_KEPT),
// handing back the nout blocks it evicted at out, or found it freed already
// (PC_FREED).
static void freed(const char *call, int r, int device, uintptr_t ptr, pc_block *out, int nout) {
	if (r == PC_KEPT && nout > 0) {
		gpuscopeGoRelease(device, out, nout);
	} else if (r == PC_FREED) {
		gpuscopeGoFreedAlready((char *)call, ptr);
	}
}

void gpuscope_free(void *ptr, ssize_t size, int device, void *stream) {
	if (gs_forked("gpuscope_free") || ptr == NULL) {
		return; // free(NULL) does nothing
	}
	if (size < 0) {
		gpuscopeGoFailSize("gpuscope_free", (uintptr_t)ptr, size); // to freeFor, < 0 is CuPy's "no size"
		return;
	}
	freeFor((uintptr_t)ptr, size, device, (uintptr_t)stream);
}

// freeFor frees ptr, not 0, allocated for stream with size bytes (< 0:
// unchecked): gpuscope_free, and gpuscope_cupy_stream_free.
static inline void freeFor(uintptr_t ptr, ssize_t size, int device, uintptr_t stream) {
	uint64_t id;
	pc_block out[PC_RELEASED];
	int nout;
	int r = pc_free(device, ptr, size, stream, &id, out, &nout);
	if (r == PC_PASS) {
		gpuscopeGoFree(ptr, size, device, stream, id);
		return;
	}
	freed("gpuscope_free", r, device, ptr, out, nout);
}

void gpuscope_record_stream(void *ptr, void *stream) {
	if (gs_forked("gpuscope_record_stream") || ptr == NULL) {
		return; // an empty tensor's: no memory, as c10's allocator skips it
	}
	if (pc_record((uintptr_t)ptr, (uintptr_t)stream) == PC_FREED) {
		gpuscopeGoFreedAlready("gpuscope_record_stream", (uintptr_t)ptr);
		return;
	}
	gpuscopeGoRecordStream((uintptr_t)ptr, (uintptr_t)stream);
}

intptr_t gpuscope_cupy_malloc(intptr_t param, size_t size, int device) {
	if (gs_forked("gpuscope_cupy_malloc")) {
		return 0;
	}
	if (size == 0) {
		return 0; // quietly, as gpuscope_alloc
	}
	for (;;) {
		// param names a scope (gpuscope_scope_begin's id), else the call
		// allocates in the thread's.
		int64_t scope = param != 0 ? 0 : gs_scope_of(device, 0);
		int64_t key = param != 0 ? (int64_t)param : scope;
		pc_block out[PC_RELEASED];
		int nout, ncached;
		void *ptr = pc_alloc(device, key, (ssize_t)size, 0, out, &nout, &ncached);
		if (ptr != NULL) {
			return (intptr_t)ptr;
		}
		int ended = 0;
		uint64_t id = 0;
		uintptr_t p = gpuscopeGoCupyMalloc(param, size, device, scope, out, nout, ncached, &id, &ended);
		if (!ended || scope == 0) {
			if (tracked(device, p, (ssize_t)size, 0, key, id)) {
				return (intptr_t)p;
			}
			if (scope == 0) {
				continue; // the scope param names ended: Go says so now
			}
		}
		gs_forget(scope);
	}
}

void gpuscope_cupy_free(intptr_t param, intptr_t ptr, int device) {
	if (gs_forked("gpuscope_cupy_free") || ptr == 0) {
		return;
	}
	uint64_t id;
	pc_block out[PC_RELEASED];
	int nout;
	int r = pc_free(device, (uintptr_t)ptr, -1, 0, &id, out, &nout);
	if (r == PC_PASS) {
		gpuscopeGoCupyFree(param, (uintptr_t)ptr, device, id);
		return;
	}
	freed("gpuscope_cupy_free", r, device, (uintptr_t)ptr, out, nout);
}

// CuPy's allocator for one stream: param is the stream, which use_cupy's
// function picks, one CFunctionAllocator a stream, as CuPy's pool keeps a
// stream's blocks for that stream.
intptr_t gpuscope_cupy_stream_malloc(intptr_t stream, size_t size, int device) {
	if (gs_forked("gpuscope_cupy_stream_malloc")) {
		return 0;
	}
	if (size == 0) {
		return 0; // quietly, as gpuscope_alloc
	}
	// A size past SSIZE_MAX reaches Go negative, where it is refused.
	return (intptr_t)allocFor((ssize_t)size, device, (uintptr_t)stream);
}

void gpuscope_cupy_stream_free(intptr_t stream, intptr_t ptr, int device) {
	if (gs_forked("gpuscope_cupy_stream_free") || ptr == 0) {
		return;
	}
	freeFor((uintptr_t)ptr, -1, device, (uintptr_t)stream);
}

int64_t gpuscope_scope_begin(int device, const char *name) {
	return gs_begin("gpuscope_scope_begin", device, name, 0);
}

// gs_begin is gpuscope_scope_begin with gpuscope_scope_begin_flags's
// flags (sleep.c), for the entry point named call.
int64_t gs_begin(const char *call, int device, const char *name, int flags) {
	if (gs_forked(call)) {
		return -1;
	}
	for (;;) {
		int64_t parent = gs_top(device);
		int ended = 0;
		int64_t id = gpuscopeGoScopeBegin(device, (char *)name, parent, flags, &ended);
		if (ended && parent != 0) {
			gs_forget(parent);
			continue;
		}
		if (id > 0 && gs_push(device, id) != 0) {
			gpuscopeGoScopeEnd(id, 0, &ended); // nothing was allocated in it
			gpuscopeGoFail((char *)call, "this thread has 128 scopes open already: end one first");
			return -1;
		}
		return id;
	}
}

int gpuscope_scope_end(int64_t scope, int flags) {
	if (gs_forked("gpuscope_scope_end")) {
		return -1;
	}
	int gone = 0;
	int rc = gpuscopeGoScopeEnd(scope, flags, &gone);
	if (rc == 0 || gone) {
		gs_forget(scope);
	}
	return rc;
}

int gpuscope_scope_bind(int64_t scope, void *stream) {
	if (gs_forked("gpuscope_scope_bind")) {
		return -1;
	}
	int device = gpuscopeGoScopeDevice(scope);
	if (device < 0) {
		return -1;
	}
	int64_t over = 0; // the scope scope is inside, which the stream is bound to
	for (;;) {
		int64_t other = 0;
		switch (gs_bind(device, (uintptr_t)stream, scope, over, &other)) {
		case 0:
			return 0;
		case -1:
			gpuscopeGoFail("gpuscope_scope_bind", "the device has 64 bindings of streams to scopes already: end one of those scopes first");
			return -1;
		}
		switch (gpuscopeGoScopeWithin(scope, other)) {
		case 1:
			over = other; // scope is inside it: bind over it, until scope ends
			continue;
		case 0:
			gpuscopeGoFailBound(scope, (uintptr_t)stream, other);
			return -1;
		}
		gs_forget(other); // it ended: the stream is free
		over = 0;
	}
}

int gpuscope_set_max_reserved(int device, size_t bytes) {
	if (gs_forked("gpuscope_set_max_reserved")) {
		return -1;
	}
	return gpuscopeGoSetMaxReserved(device, bytes);
}

int gpuscope_name_call(const char *c_name, const char *name) {
	if (gs_forked("gpuscope_name_call")) {
		return -1;
	}
	return gpuscopeGoNameCall((char *)c_name, (char *)name);
}

int gpuscope_set_memory_fraction(int device, double fraction) {
	if (gs_forked("gpuscope_set_memory_fraction")) {
		return -1;
	}
	return gpuscopeGoSetMemoryFraction(device, fraction);
}

int gpuscope_empty_cache(int device) {
	if (gs_forked("gpuscope_empty_cache")) {
		return -1;
	}
	return gpuscopeGoEmptyCache(device);
}

size_t gpuscope_stats(int device, char *buf, size_t len) {
	if (gs_forked("gpuscope_stats")) {
		char msg[512];
		gs_last_error(msg, sizeof msg, NULL);
		return (size_t)snprintf(buf, len, "{\"error\":\"%s\"}", msg); // the message has no quote
	}
	return gpuscopeGoStats(device, gs_top(device), buf, len);
}

size_t gpuscope_summary(int device, char *buf, size_t len) {
	if (gs_forked("gpuscope_summary")) {
		return gs_last_error(buf, len, NULL);
	}
	return gpuscopeGoSummary(device, buf, len);
}

size_t gpuscope_scope_stats(int64_t scope, char *buf, size_t len) {
	if (gs_forked("gpuscope_scope_stats")) {
		return 0;
	}
	return gpuscopeGoScopeStats(scope, buf, len);
}

size_t gpuscope_last_error(char *buf, size_t len, int *kind) { return gs_last_error(buf, len, kind); }

int gpuscope_print_failures(int on) {
	if (gs_forked("gpuscope_print_failures")) {
		return -1;
	}
	gpuscopeGoPrintFailures(on);
	return 0;
}
