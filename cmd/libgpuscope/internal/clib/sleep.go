package clib

/*
#include <stdint.h>
*/
import "C"

import (
	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/foreign"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// gpuscope.h's flags of scopes that sleep.
const (
	sleepable    = 1 // GPUSCOPE_SLEEPABLE, for gpuscope_scope_begin_flags
	keepContents = 1 // GPUSCOPE_KEEP_CONTENTS, for gpuscope_scope_sleep
)

// gpuscopeGoScopeSleep puts the sleepable scope to sleep, keeping what its
// buffers hold where flags say GPUSCOPE_KEEP_CONTENTS.
//
//export gpuscopeGoScopeSleep
func gpuscopeGoScopeSleep(scope C.int64_t, flags C.int) C.int {
	if flags&^keepContents != 0 {
		fail("gpuscope_scope_sleep", prefixed.Errorf("gpu", "flags %#x: only GPUSCOPE_KEEP_CONTENTS (1) is known; the scope is awake", int(flags)))
		return failed
	}
	if err := foreign.Sleep(int64(scope), flags&keepContents != 0); err != nil {
		fail("gpuscope_scope_sleep", err)
		return failed
	}
	return 0
}

// gpuscopeGoScopeWake wakes the sleepable scope.
//
//export gpuscopeGoScopeWake
func gpuscopeGoScopeWake(scope C.int64_t) C.int {
	if err := foreign.Wake(int64(scope)); err != nil {
		fail("gpuscope_scope_wake", err)
		return failed
	}
	return 0
}
