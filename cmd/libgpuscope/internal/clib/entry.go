package clib

/*
#cgo CFLAGS: -I${SRCDIR}/../..
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
*/
import "C"

import (
	"unsafe"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/foreign"
	"github.com/gpuscope/gpuscope/internal/ccall"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// The C entry points of libgpuscope, which gpuscope.h declares: each
// converts its arguments and makes one call into package foreign. entry.c
// defines the exported names over these. Those that may open a device put
// the pair cache in front of it first (usePairCache).

// failed is what a call that fails returns, where it returns an int: its
// message is in the stats.
const failed = -1

// gpuscopeGoAlloc frees the nflush blocks at flush, which the pair cache
// held, and allocates; *tok is the token of the scope the allocation
// belongs to, for the pair cache.
//
//export gpuscopeGoAlloc
func gpuscopeGoAlloc(size C.ssize_t, device C.int, stream C.uintptr_t, flush *C.uintptr_t, nflush C.int, tok *C.uint64_t) C.uintptr_t {
	usePairCache()
	blocks := unsafe.Slice((*uintptr)(unsafe.Pointer(flush)), int(nflush))
	ptr, t, err := foreign.AllocAfter(blocks, int(device), int64(size), uintptr(stream))
	if err != nil {
		ccall.Fail("gpuscope_alloc", err)
		return 0
	}
	*tok = C.uint64_t(t)
	return C.uintptr_t(ptr)
}

// gpuscopeGoFreedAlready fails the call named call, whose ptr is in a
// pair cache: the library freed it already.
//
//export gpuscopeGoFreedAlready
func gpuscopeGoFreedAlready(call *C.char, ptr C.uintptr_t) {
	ccall.Fail(C.GoString(call), foreign.FreedAlready(uintptr(ptr)))
}

//export gpuscopeGoFree
func gpuscopeGoFree(ptr C.uintptr_t, size C.ssize_t, device C.int, stream C.uintptr_t) {
	if err := foreign.Free(int(device), uintptr(ptr), int64(size), uintptr(stream)); err != nil {
		ccall.Fail("gpuscope_free", err)
	}
}

//export gpuscopeGoRecordStream
func gpuscopeGoRecordStream(ptr, stream C.uintptr_t) {
	if err := foreign.RecordStream(uintptr(ptr), uintptr(stream)); err != nil {
		ccall.Fail("gpuscope_record_stream", err)
	}
}

//export gpuscopeGoCupyMalloc
func gpuscopeGoCupyMalloc(param C.intptr_t, size C.size_t, device C.int) C.uintptr_t {
	usePairCache()
	n, err := ccall.Size(uint64(size))
	var ptr uintptr
	if err == nil {
		if param == 0 {
			ptr, err = foreign.Alloc(int(device), n, 0)
		} else {
			ptr, err = foreign.AllocIn(int64(param), int(device), n, 0)
		}
	}
	if err != nil {
		ccall.Fail("gpuscope_cupy_malloc", err)
		return 0
	}
	return C.uintptr_t(ptr)
}

//export gpuscopeGoCupyFree
func gpuscopeGoCupyFree(_ C.intptr_t, ptr C.uintptr_t, device C.int) {
	if err := foreign.Free(int(device), uintptr(ptr), -1, 0); err != nil {
		ccall.Fail("gpuscope_cupy_free", err)
	}
}

//export gpuscopeGoScopeBegin
func gpuscopeGoScopeBegin(device C.int, name *C.char) C.int64_t {
	usePairCache()
	var s string
	if name != nil {
		s = C.GoString(name)
	}
	id, err := foreign.Begin(int(device), s)
	if err != nil {
		ccall.Fail("gpuscope_scope_begin", err)
		return failed
	}
	return C.int64_t(id)
}

//export gpuscopeGoScopeEnd
func gpuscopeGoScopeEnd(scope C.int64_t, flags C.int) C.int {
	if flags&^1 != 0 {
		ccall.Fail("gpuscope_scope_end", prefixed.Errorf("gpu", "flags %#x: only GPUSCOPE_FREE_LIVE (1) is known; the scope is still open", int(flags)))
		return failed
	}
	if err := foreign.End(int64(scope), flags&1 != 0); err != nil {
		ccall.Fail("gpuscope_scope_end", err)
		return failed
	}
	return 0
}

//export gpuscopeGoSetMaxReserved
func gpuscopeGoSetMaxReserved(device C.int, bytes C.size_t) C.int {
	usePairCache()
	n, err := ccall.Size(uint64(bytes))
	if err == nil {
		err = foreign.SetMaxReserved(int(device), n)
	}
	if err != nil {
		ccall.Fail("gpuscope_set_max_reserved", err)
		return failed
	}
	return 0
}

//export gpuscopeGoStats
func gpuscopeGoStats(device C.int, buf *C.char, n C.size_t) C.size_t {
	usePairCache()
	return put(foreign.Stats(int(device)), buf, n)
}

//export gpuscopeGoSummary
func gpuscopeGoSummary(device C.int, buf *C.char, n C.size_t) C.size_t {
	usePairCache()
	return put([]byte(foreign.Summary(int(device))), buf, n)
}

// put writes text into the n bytes at buf as snprintf does: as much as
// fits with a terminating NUL, returning the length of all of it.
func put(text []byte, buf *C.char, n C.size_t) C.size_t {
	if buf != nil && n > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), n)
		k := copy(dst[:n-1], text)
		dst[k] = 0
	}
	return C.size_t(len(text))
}
