// The entry points of scopes that sleep (gpuscope.h): a scope begun
// sleepable, put to sleep and woken by its id.
#include "gpuscope.h" // cmd/libgpuscope's, by the -I of entry.go
#include "_cgo_export.h"
#include "scopes.h"

int64_t gpuscope_scope_begin_flags(int device, const char *name, int flags) {
	if (gs_forked("gpuscope_scope_begin_flags")) {
		return -1; // before any check that reports through Go
	}
	if (flags & ~GPUSCOPE_SLEEPABLE) {
		gpuscopeGoFail("gpuscope_scope_begin_flags", "flags: only GPUSCOPE_SLEEPABLE (1) is known");
		return -1;
	}
	return gs_begin("gpuscope_scope_begin_flags", device, name, flags);
}

int gpuscope_scope_sleep(int64_t scope, int flags) {
	if (gs_forked("gpuscope_scope_sleep")) {
		return -1;
	}
	return gpuscopeGoScopeSleep(scope, flags);
}

int gpuscope_scope_wake(int64_t scope) {
	if (gs_forked("gpuscope_scope_wake")) {
		return -1;
	}
	return gpuscopeGoScopeWake(scope);
}
