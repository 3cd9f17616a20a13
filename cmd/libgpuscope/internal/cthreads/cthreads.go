// Package cthreads runs testdata/cthreads.c, which calls libgpuscope's
// entry points from threads that Go did not make, and threads that call a
// gpu/capi.Allocator, inside a Go program:
// there the race detector sees the Go side of every call, which it cannot
// where the entry points are a shared library that a C program loads.
package cthreads

/*
#cgo CFLAGS: -I${SRCDIR}/../.. -pthread
#cgo LDFLAGS: -pthread
int cthreads_main(void);
int ctx_threads(void *ctx, void *alloc, void *free, int threads, int keep);
int c_pairs(long n, long size, int freelist);
#include <stdlib.h>
#include "gpuscope.h"
*/
import "C"

import (
	"unsafe"

	"github.com/gpuscope/gpuscope/gpu/capi" // the entry points it calls
)

// Run runs the C program's checks and returns its exit status: 0 where all
// held. It prints what failed to standard output.
func Run() int { return int(C.cthreads_main()) }

// RunAllocator calls a's functions from threads C threads, as a library
// does, each leaving keep buffers allocated, and returns how many
// allocations failed.
func RunAllocator(a capi.Allocator, threads, keep int) int {
	return int(C.ctx_threads(a.Ctx, a.Alloc, a.Free, C.int(threads), C.int(keep)))
}

// Pairs makes n alloc+free pairs of size bytes on device 0 through the
// PyTorch entry points, from a C thread, and reports whether all
// allocations succeeded.
func Pairs(n int, size int64) bool { return C.c_pairs(C.long(n), C.long(size), 0) == 0 }

// FreeListPairs makes n pairs as Pairs does, through the minimal free list
// per size of scripts/measure/interop_freelist.c, on host memory: what a
// pair costs with almost nothing of an allocator's.
func FreeListPairs(n int, size int64) bool { return C.c_pairs(C.long(n), C.long(size), 1) == 0 }

// BeginScope begins a scope named name on device 0 and returns its id, or
// a negative number.
func BeginScope(name string) int64 {
	s := C.CString(name)
	defer C.free(unsafe.Pointer(s))
	return int64(C.gpuscope_scope_begin(0, s))
}

// EndScope ends the scope id, freeing what is live in it, and reports
// whether it ended.
func EndScope(id int64) bool { return C.gpuscope_scope_end(C.int64_t(id), C.GPUSCOPE_FREE_LIVE) == 0 }
