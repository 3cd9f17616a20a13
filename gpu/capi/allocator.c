// The context form's functions (allocator.go): ctx holds the id of the
// scope's record.
#include <stdint.h>
#include <stddef.h>
#include "frontcache.h"
#include "_cgo_export.h"

void *gpuscopeCtxAlloc(void *ctx, size_t size, void *stream) {
	return (void *)gpuscopeGoCtxAlloc(*(int64_t *)ctx, size, (uintptr_t)stream);
}

void gpuscopeCtxFree(void *ctx, void *ptr, size_t size, void *stream) {
	// A pointer of gpuscope_alloc's, in a front cache, is freed already.
	if (ptr != NULL && fc_forget(-1, (uintptr_t)ptr, 0) == FC_FREED) {
		gpuscopeGoFreedAlready("context allocator's free", (uintptr_t)ptr);
		return;
	}
	gpuscopeGoCtxFree(*(int64_t *)ctx, (uintptr_t)ptr, size, (uintptr_t)stream);
}
