package capi

// The context form's calls as its C functions make them, for the tests:
// Alloc and Free through the Allocator of a's context.

func Alloc(a Allocator, size uint64, stream uintptr) (uintptr, error) {
	return ctxAlloc(*(*int64)(a.Ctx), size, stream)
}

func Free(a Allocator, ptr uintptr, size uint64, stream uintptr) error {
	return ctxFree(*(*int64)(a.Ctx), ptr, size, stream)
}

// Attached returns how many Allocators the registry holds.
func Attached() int {
	attachedScopes.mu.RLock()
	defer attachedScopes.mu.RUnlock()
	return len(attachedScopes.byID)
}

const MinSweep = minSweep
