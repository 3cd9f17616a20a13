package clib

/*
#cgo CFLAGS: -I${SRCDIR}/../..
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include "scopes.h"
*/
import "C"

import (
	"errors"
	"unsafe"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/foreign"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/ccall"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// The C entry points of libgpuscope, which gpuscope.h declares: each
// converts its arguments and makes one call into package foreign. entry.c
// defines the exported names over these. Those that may open a device put
// the pair cache in front of it first (usePairCache).

// failed is what a call that fails returns, where it returns an int: its
// message is the calling thread's last error, and in the stats.
const failed = -1

// The kinds of a failure, as gpuscope.h's gpuscope_last_error gives them.
const (
	outOfMemory  = 1 // GPUSCOPE_OUT_OF_MEMORY
	otherFailure = 2 // GPUSCOPE_FAILED
	invalidSize  = 3 // GPUSCOPE_INVALID_SIZE
)

// fail records the failure of the C call named call, which tells its
// caller (NULL, 0 or < 0): counted and kept for gpuscope_stats, written to
// standard error unless gpuscope_print_failures(0) asked not to
// (ccall.FailTold), and kept as the calling thread's last error for
// gpuscope_last_error, with its kind.
func fail(call string, err error) { record(call, err, ccall.FailTold) }

// failUntold is fail for a call that returns nothing (a free,
// record_stream), whose failure is written always: nothing else tells the
// caller.
func failUntold(call string, err error) { record(call, err, ccall.Fail) }

func record(call string, err error, count func(string, error)) {
	count(call, err)
	msg := call + ": " + err.Error()
	kind := C.int(otherFailure)
	switch {
	case errors.Is(err, gpu.ErrOutOfMemory):
		kind = outOfMemory
	case errors.Is(err, gpu.ErrInvalidSize):
		kind = invalidSize
	}
	C.gs_set_error(kind, (*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
}

// ended reports, through *flag, whether err is foreign.ErrEnded: the scope
// the call named has ended, and C asks again with the enclosing one. Such
// a failure is no failure of the call's.
func ended(err error, flag *C.int) bool {
	if errors.Is(err, foreign.ErrEnded) {
		*flag = 1
		return true
	}
	return false
}

// gpuscopeGoAlloc frees the nout blocks at out, which the pair cache
// evicted, and allocates in scope, where the cache held ncached blocks when
// it did not serve the allocation; *id is the allocation's id, for the
// cache's table.
//
//export gpuscopeGoAlloc
func gpuscopeGoAlloc(size C.ssize_t, device C.int, stream C.uintptr_t, scope C.int64_t, out *C.pc_block, nout, ncached C.int, id *C.uint64_t, end *C.int) C.uintptr_t {
	usePairCache()
	a, err := foreign.AllocAfter(blocks(out, nout), int(ncached), int(device), int64(scope), int64(size), uintptr(stream))
	if err != nil {
		if !ended(err, end) {
			fail("gpuscope_alloc", err)
		}
		return 0
	}
	*id = C.uint64_t(a.ID)
	return C.uintptr_t(a.Ptr)
}

// gpuscopeGoSettle says what became of the allocation of id at ptr, whose
// scope ended before the pair cache's table tracked it (foreign.Settle):
// the scope that holds it now, or -1 where it was freed.
//
//export gpuscopeGoSettle
func gpuscopeGoSettle(ptr C.uintptr_t, id C.uint64_t) C.int64_t {
	return C.int64_t(foreign.Settle(uintptr(ptr), uint64(id)))
}

// gpuscopeGoRelease frees the n blocks at out, which the pair cache of
// device evicted.
//
//export gpuscopeGoRelease
func gpuscopeGoRelease(device C.int, out *C.pc_block, n C.int) {
	foreign.Release(int(device), blocks(out, n))
}

// blocks is the n blocks at out, in Go's type.
func blocks(out *C.pc_block, n C.int) []foreign.Block {
	return unsafe.Slice((*foreign.Block)(unsafe.Pointer(out)), int(n))
}

// A pc_block is a foreign.Block.
var _ [unsafe.Sizeof(C.pc_block{}) - unsafe.Sizeof(foreign.Block{})]struct{}
var _ [unsafe.Sizeof(foreign.Block{}) - unsafe.Sizeof(C.pc_block{})]struct{}

// gpuscopeGoFreedAlready fails the call named call, whose ptr is in a
// pair cache: the library freed it already.
//
//export gpuscopeGoFreedAlready
func gpuscopeGoFreedAlready(call *C.char, ptr C.uintptr_t) {
	fail(C.GoString(call), foreign.FreedAlready(uintptr(ptr)))
}

// gpuscopeGoFail fails the call named call with the message msg, for a
// failure the C side found.
//
//export gpuscopeGoFail
func gpuscopeGoFail(call, msg *C.char) {
	fail(C.GoString(call), prefixed.Errorf("gpu", "%s", C.GoString(msg)))
}

// gpuscopeGoFree frees ptr, which the pair cache did not keep; id is its
// allocation's id where the cache's table knew it, else 0.
//
//export gpuscopeGoFree
func gpuscopeGoFree(ptr C.uintptr_t, size C.ssize_t, device C.int, stream C.uintptr_t, id C.uint64_t) {
	if err := foreign.FreeID(int(device), uintptr(ptr), uint64(id), int64(size), uintptr(stream)); err != nil {
		failUntold("gpuscope_free", err)
	}
}

// gpuscopeGoFailSize fails the free named call of ptr with size bytes,
// < 0: a size_t past SSIZE_MAX, which no allocation has.
//
//export gpuscopeGoFailSize
func gpuscopeGoFailSize(call *C.char, ptr C.uintptr_t, size C.ssize_t) {
	failUntold(C.GoString(call), prefixed.Kind("gpu", gpu.ErrInvalidSize, "%#x freed with %d bytes: not freed", uintptr(ptr), int64(size)))
}

//export gpuscopeGoRecordStream
func gpuscopeGoRecordStream(ptr, stream C.uintptr_t) {
	if err := foreign.RecordStream(uintptr(ptr), uintptr(stream)); err != nil {
		failUntold("gpuscope_record_stream", err)
	}
}

// gpuscopeGoCupyMalloc is gpuscopeGoAlloc for CuPy's form: in the scope
// param names, else in scope.
//
//export gpuscopeGoCupyMalloc
func gpuscopeGoCupyMalloc(param C.intptr_t, size C.size_t, device C.int, scope C.int64_t, out *C.pc_block, nout, ncached C.int, id *C.uint64_t, end *C.int) C.uintptr_t {
	usePairCache()
	n, err := ccall.Size(uint64(size))
	var a foreign.Block
	if err == nil {
		a, err = foreign.AllocInAfter(blocks(out, nout), int(ncached), int64(param), int(device), int64(scope), n)
	}
	if err != nil {
		if !ended(err, end) {
			fail("gpuscope_cupy_malloc", err)
		}
		return 0
	}
	*id = C.uint64_t(a.ID)
	return C.uintptr_t(a.Ptr)
}

// gpuscopeGoCupyFree frees ptr as gpuscopeGoFree does, for CuPy's form,
// which gives no size.
//
//export gpuscopeGoCupyFree
func gpuscopeGoCupyFree(_ C.intptr_t, ptr C.uintptr_t, device C.int, id C.uint64_t) {
	if err := foreign.FreeID(int(device), uintptr(ptr), uint64(id), -1, 0); err != nil {
		failUntold("gpuscope_cupy_free", err)
	}
}

//export gpuscopeGoScopeBegin
func gpuscopeGoScopeBegin(device C.int, name *C.char, parent C.int64_t, flags C.int, end *C.int) C.int64_t {
	usePairCache()
	var s string
	if name != nil {
		s = C.GoString(name)
	}
	begin, call := foreign.Begin, "gpuscope_scope_begin"
	if flags&sleepable != 0 {
		begin, call = foreign.BeginSleepable, "gpuscope_scope_begin_flags" // sleep.go
	}
	id, err := begin(int(device), int64(parent), s)
	if err != nil {
		if !ended(err, end) {
			fail(call, err)
		}
		return failed
	}
	return C.int64_t(id)
}

// gpuscopeGoScopeEnd ends scope; *gone is set where no such scope is
// open, so that C forgets it.
//
//export gpuscopeGoScopeEnd
func gpuscopeGoScopeEnd(scope C.int64_t, flags C.int, gone *C.int) C.int {
	if flags&^1 != 0 {
		fail("gpuscope_scope_end", prefixed.Errorf("gpu", "flags %#x: only GPUSCOPE_FREE_LIVE (1) is known; the scope is still open", int(flags)))
		return failed
	}
	if err := foreign.End(int64(scope), flags&1 != 0); err != nil {
		if !foreign.IsOpen(int64(scope)) {
			*gone = 1
		}
		fail("gpuscope_scope_end", err)
		return failed
	}
	return 0
}

// gpuscopeGoScopeDevice returns the device of scope, open, or -1.
//
//export gpuscopeGoScopeDevice
func gpuscopeGoScopeDevice(scope C.int64_t) C.int {
	i, err := foreign.DeviceOf(int64(scope))
	if err != nil {
		fail("gpuscope_scope_bind", err)
		return failed
	}
	return C.int(i)
}

// gpuscopeGoScopeWithin reports where scope is, for a bind of a stream
// that other holds: 1 inside other, which is open, 0 not inside it, -1
// where other is not open.
//
//export gpuscopeGoScopeWithin
func gpuscopeGoScopeWithin(scope, other C.int64_t) C.int {
	switch open, inside := foreign.Within(int64(scope), int64(other)); {
	case !open:
		return -1
	case inside:
		return 1
	}
	return 0
}

// gpuscopeGoFailBound fails gpuscope_scope_bind of stream to scope, which
// other, open, holds bound.
//
//export gpuscopeGoFailBound
func gpuscopeGoFailBound(scope C.int64_t, stream C.uintptr_t, other C.int64_t) {
	fail("gpuscope_scope_bind", prefixed.Errorf("gpu", "stream %#x is bound to scope %d, which is open, and scope %d is not inside it: it is not bound to it", uintptr(stream), int64(other), int64(scope)))
}

//export gpuscopeGoScopeStats
func gpuscopeGoScopeStats(scope C.int64_t, buf *C.char, n C.size_t) C.size_t {
	b, err := foreign.ScopeStats(int64(scope))
	if err != nil {
		fail("gpuscope_scope_stats", err)
		return 0
	}
	return put(b, buf, n)
}

//export gpuscopeGoSetMaxReserved
func gpuscopeGoSetMaxReserved(device C.int, bytes C.size_t) C.int {
	usePairCache()
	n, err := ccall.Size(uint64(bytes))
	if err == nil {
		err = foreign.SetMaxReserved(int(device), n)
	}
	if err != nil {
		fail("gpuscope_set_max_reserved", err)
		return failed
	}
	return 0
}

//export gpuscopeGoNameCall
func gpuscopeGoNameCall(c, name *C.char) C.int {
	var cName, n string
	if c != nil {
		cName = C.GoString(c)
	}
	if name != nil {
		n = C.GoString(name)
	}
	if err := foreign.NameCall(cName, n); err != nil {
		fail("gpuscope_name_call", err)
		return failed
	}
	return 0
}

//export gpuscopeGoPrintFailures
func gpuscopeGoPrintFailures(on C.int) { ccall.SetQuiet(on == 0) }

//export gpuscopeGoSetMemoryFraction
func gpuscopeGoSetMemoryFraction(device C.int, fraction C.double) C.int {
	usePairCache()
	if err := foreign.SetMemoryFraction(int(device), float64(fraction)); err != nil {
		fail("gpuscope_set_memory_fraction", err)
		return failed
	}
	return 0
}

//export gpuscopeGoEmptyCache
func gpuscopeGoEmptyCache(device C.int) C.int {
	usePairCache()
	if err := foreign.EmptyCache(int(device)); err != nil {
		fail("gpuscope_empty_cache", err)
		return failed
	}
	return 0
}

//export gpuscopeGoStats
func gpuscopeGoStats(device C.int, scope C.int64_t, buf *C.char, n C.size_t) C.size_t {
	usePairCache()
	return put(foreign.Stats(int(device), int64(scope)), buf, n)
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
