package scope

import (
	"runtime"
	"strconv"
	"strings"
)

// unnamed names a scope opened without a name, so that a person can find
// it: the function that opened it, where its stack is recorded, and its ID
// ("main.loadBatch#12"); else "scope#12".
func unnamed(id uint64, stack []uintptr) string {
	name := "scope"
	frames := runtime.CallersFrames(stack)
	for len(stack) > 0 {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "github.com/gpuscope/gpuscope/gpu.") &&
			!strings.HasPrefix(f.Function, "github.com/gpuscope/gpuscope/scope.") &&
			!strings.HasPrefix(f.Function, "runtime.") && f.Function != "" {
			name = f.Function[strings.LastIndex(f.Function, "/")+1:]
			break
		}
		if !more {
			break
		}
	}
	return name + "#" + strconv.FormatUint(id, 10)
}

// stackDepth is the most frames a recorded stack holds.
const stackDepth = 32

// callerStack records the stack of the user's call into this package. The
// exported function the user called (Tree.Open, Scope.Alloc,
// Scope.OwnResource) calls it itself, so that the frames it skips are
// always the same.
func callerStack() []uintptr {
	const skip = 3 // runtime.Callers, callerStack, the exported function
	var pcs [stackDepth]uintptr
	n := runtime.Callers(skip, pcs[:])
	return append([]uintptr(nil), pcs[:n]...)
}
