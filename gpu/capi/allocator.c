// The context form's functions (allocator.go): ctx holds the id of the
// scope's record.
#include <stdint.h>
#include <stddef.h>
#include "_cgo_export.h"

void *gpuscopeCtxAlloc(void *ctx, size_t size, void *stream) {
	return (void *)gpuscopeGoCtxAlloc(*(int64_t *)ctx, size, (uintptr_t)stream);
}

void gpuscopeCtxFree(void *ctx, void *ptr, size_t size, void *stream) {
	gpuscopeGoCtxFree(*(int64_t *)ctx, (uintptr_t)ptr, size, (uintptr_t)stream);
}
