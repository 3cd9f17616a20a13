// The exported names of the library: each converts its arguments and calls
// one Go function (entry.go), a single crossing into Go.
#include "gpuscope.h" // cmd/libgpuscope's, by the -I of entry.go
#include "_cgo_export.h"

void *gpuscope_alloc(ssize_t size, int device, void *stream) {
	return (void *)gpuscopeGoAlloc(size, device, (uintptr_t)stream);
}

void gpuscope_free(void *ptr, ssize_t size, int device, void *stream) {
	gpuscopeGoFree((uintptr_t)ptr, size, device, (uintptr_t)stream);
}

void gpuscope_record_stream(void *ptr, void *stream) {
	gpuscopeGoRecordStream((uintptr_t)ptr, (uintptr_t)stream);
}

intptr_t gpuscope_cupy_malloc(intptr_t param, size_t size, int device) {
	return (intptr_t)gpuscopeGoCupyMalloc(param, size, device);
}

void gpuscope_cupy_free(intptr_t param, intptr_t ptr, int device) {
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
