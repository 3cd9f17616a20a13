// The exported names of the library: each converts its arguments and calls
// one Go function (entry.go), a single crossing into Go, unless the pair
// cache (paircache.c) serves it: a PyTorch-form pair of a size the library
// freed before crosses not at all.
#include "gpuscope.h" // cmd/libgpuscope's, by the -I of entry.go
#include "paircache.h"
#include "_cgo_export.h"

void *gpuscope_alloc(ssize_t size, int device, void *stream) {
	if (size == 0) {
		return NULL; // quietly, as c10's allocator does (entry.go)
	}
	uintptr_t flush[PC_CACHED];
	int n;
	void *ptr = pc_alloc(device, size, (uintptr_t)stream, flush, &n);
	if (ptr != NULL) {
		return ptr;
	}
	uint64_t tok = 0;
	uintptr_t p = gpuscopeGoAlloc(size, device, (uintptr_t)stream, flush, n, &tok);
	pc_track(device, p, size, (uintptr_t)stream, tok);
	return (void *)p;
}

void gpuscope_free(void *ptr, ssize_t size, int device, void *stream) {
	if (ptr == NULL) {
		return; // as free(NULL)
	}
	switch (pc_free(device, (uintptr_t)ptr, size, (uintptr_t)stream)) {
	case PC_KEPT:
		return;
	case PC_FREED:
		gpuscopeGoFreedAlready("gpuscope_free", (uintptr_t)ptr);
		return;
	}
	gpuscopeGoFree((uintptr_t)ptr, size, device, (uintptr_t)stream);
}

void gpuscope_record_stream(void *ptr, void *stream) {
	if (pc_forget(-1, (uintptr_t)ptr, 1) == PC_FREED) {
		gpuscopeGoFreedAlready("gpuscope_record_stream", (uintptr_t)ptr);
		return;
	}
	gpuscopeGoRecordStream((uintptr_t)ptr, (uintptr_t)stream);
}

intptr_t gpuscope_cupy_malloc(intptr_t param, size_t size, int device) {
	return (intptr_t)gpuscopeGoCupyMalloc(param, size, device);
}

void gpuscope_cupy_free(intptr_t param, intptr_t ptr, int device) {
	if (ptr != 0 && pc_forget(device, (uintptr_t)ptr, 0) == PC_FREED) {
		gpuscopeGoFreedAlready("gpuscope_cupy_free", (uintptr_t)ptr);
		return;
	}
	gpuscopeGoCupyFree(param, (uintptr_t)ptr, device);
}

int64_t gpuscope_scope_begin(int device, const char *name) {
	return gpuscopeGoScopeBegin(device, (char *)name);
}

int gpuscope_scope_end(int64_t scope, int flags) {
	return gpuscopeGoScopeEnd(scope, flags);
}

int gpuscope_set_max_reserved(int device, size_t bytes) {
	return gpuscopeGoSetMaxReserved(device, bytes);
}

size_t gpuscope_stats(int device, char *buf, size_t len) {
	return gpuscopeGoStats(device, buf, len);
}

size_t gpuscope_summary(int device, char *buf, size_t len) {
	return gpuscopeGoSummary(device, buf, len);
}
