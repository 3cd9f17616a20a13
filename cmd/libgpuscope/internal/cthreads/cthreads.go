// Package cthreads runs testdata/cthreads.c, which calls libgpuscope's
// entry points (package clib) from threads that Go did not make, and
// threads that call a gpu/capi.Allocator, inside a Go program:
// there the race detector sees the Go side of every call, which it cannot
// where the entry points are a shared library that a C program loads.
package cthreads

/*
#cgo CFLAGS: -I${SRCDIR}/../.. -pthread
#cgo LDFLAGS: -pthread
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
int cthreads_main(void);
int ctx_threads(void *ctx, void *alloc, void *free, int threads, int keep);
int c_pairs(long n, long size, int how);
uintptr_t c_alloc(long size, uintptr_t stream);
void c_free(uintptr_t ptr, long size, uintptr_t stream);
void c_record_stream(uintptr_t ptr, uintptr_t stream);
int c_track_after_end(int dev);
long c_ends_under_allocations(int threads, int rounds, int flags);
int c_frees_racing_sleep(int64_t scope, const uintptr_t *ptrs, long n, long size, int threads, int cycles);
size_t pc_places(int dev);
uintptr_t ctx_once(void *ctx, void *alloc, void *free, int op, uintptr_t ptr, size_t size);
#include "gpuscope.h"
*/
import "C"

import (
	"encoding/json"
	"unsafe"

	_ "github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/clib" // the entry points it calls
	"github.com/gpuscope/gpuscope/gpu/capi"                        // the context form it calls
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

// Alloc allocates size bytes through a from a C thread of its own and
// returns the pointer, 0 where the allocation failed.
func Alloc(a capi.Allocator, size uint64) uintptr {
	return uintptr(C.ctx_once(a.Ctx, a.Alloc, a.Free, 0, 0, C.size_t(size)))
}

// Free frees ptr, of size bytes (0: the library does not say), through a
// from a C thread of its own.
func Free(a capi.Allocator, ptr uintptr, size uint64) {
	C.ctx_once(a.Ctx, a.Alloc, a.Free, 1, C.uintptr_t(ptr), C.size_t(size))
}

// FreeNeverGiven frees, through a from a C thread of its own, 1 KiB of C
// memory that a never gave.
func FreeNeverGiven(a capi.Allocator) { C.ctx_once(a.Ctx, a.Alloc, a.Free, 2, 0, 0) }

// Failures returns how many calls from C failed in the process, and the
// last one's message, as gpuscope_stats gives them: of device -1, which
// does not exist, so that reading them opens no device.
func Failures() (n int64, last string) {
	buf := make([]byte, 1<<16)
	k := C.gpuscope_stats(-1, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	var st struct {
		Failures  int64  `json:"c_failures"`
		LastError string `json:"c_last_error"`
	}
	if err := json.Unmarshal(buf[:min(int(k), len(buf)-1)], &st); err != nil {
		panic("cthreads: gpuscope_stats is not JSON: " + err.Error())
	}
	return st.Failures, st.LastError
}

// Stats returns device's gpuscope_stats, JSON.
func Stats(device int) []byte {
	buf := make([]byte, 1<<16)
	k := C.gpuscope_stats(C.int(device), (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	return buf[:min(int(k), len(buf)-1)]
}

// Pairs makes n alloc+free pairs of size bytes on device 0 through the
// PyTorch entry points, from a C thread, and reports whether all
// allocations succeeded.
func Pairs(n int, size int64) bool { return C.c_pairs(C.long(n), C.long(size), 0) == 0 }

// FreeListPairs makes n pairs as Pairs does, through the minimal free list
// per size of scripts/measure/interop_freelist.c, on host memory: what a
// pair costs with almost nothing of an allocator's.
func FreeListPairs(n int, size int64) bool { return C.c_pairs(C.long(n), C.long(size), 1) == 0 }

// CupyPairs makes n pairs as Pairs does, through CuPy's entry points
// (gpuscope_cupy_malloc, gpuscope_cupy_free, param 0).
func CupyPairs(n int, size int64) bool { return C.c_pairs(C.long(n), C.long(size), 2) == 0 }

// CupyFreeListPairs makes n pairs through the free list in CuPy's form
// (fl_cupy_malloc, fl_cupy_free), whose free finds the size in a table.
func CupyFreeListPairs(n int, size int64) bool { return C.c_pairs(C.long(n), C.long(size), 3) == 0 }

// TorchAlloc allocates size bytes on device 0 for stream through
// gpuscope_alloc, from the calling goroutine's thread.
func TorchAlloc(size int64, stream uintptr) uintptr {
	return uintptr(C.c_alloc(C.long(size), C.uintptr_t(stream)))
}

// TorchFree frees ptr through gpuscope_free, as TorchAlloc allocated it.
func TorchFree(ptr uintptr, size int64, stream uintptr) {
	C.c_free(C.uintptr_t(ptr), C.long(size), C.uintptr_t(stream))
}

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

// BeginSleepable begins a sleepable scope named name on device 0
// (gpuscope_scope_begin_flags) and returns its id, or a negative number.
func BeginSleepable(name string) int64 {
	s := C.CString(name)
	defer C.free(unsafe.Pointer(s))
	return int64(C.gpuscope_scope_begin_flags(0, s, C.GPUSCOPE_SLEEPABLE))
}

// Sleep puts the sleepable scope id to sleep, keeping its contents, and
// reports whether it sleeps; Wake wakes it.
func Sleep(id int64) bool {
	return C.gpuscope_scope_sleep(C.int64_t(id), C.GPUSCOPE_KEEP_CONTENTS) == 0
}

func Wake(id int64) bool { return C.gpuscope_scope_wake(C.int64_t(id)) == 0 }

// EndScopeKeeping ends the scope id, passing what is live in it to the
// enclosing scope, and reports whether it ended.
func EndScopeKeeping(id int64) bool { return C.gpuscope_scope_end(C.int64_t(id), 0) == 0 }

// RecordStream is gpuscope_record_stream of ptr on stream.
func RecordStream(ptr, stream uintptr) {
	C.c_record_stream(C.uintptr_t(ptr), C.uintptr_t(stream))
}

// TrackAfterEnd is what the pair cache's table of device dev (one no
// test opens) says as it tracks allocations of scopes open and ended
// (pairs.c's c_track_after_end).
func TrackAfterEnd(dev int) int { return int(C.c_track_after_end(C.int(dev))) }

// EndsUnderAllocations runs threads C threads that allocate and free for a
// stream bound to a scope while rounds scopes take the stream and end with
// flags (ends.c), and returns how many allocations they made, or -1 where
// one failed.
func EndsUnderAllocations(threads, rounds, flags int) int64 {
	return int64(C.c_ends_under_allocations(C.int(threads), C.int(rounds), C.int(flags)))
}

// FreesRacingSleep frees ptrs, buffers of size bytes allocated for the
// default stream, from threads C threads while the calling goroutine's
// thread puts the sleepable scope id to sleep and wakes it cycles times
// (sleeps.c), and returns how many of those sleeps and wakes failed.
func FreesRacingSleep(id int64, ptrs []uintptr, size int64, threads, cycles int) int {
	return int(C.c_frees_racing_sleep(C.int64_t(id), (*C.uintptr_t)(unsafe.Pointer(&ptrs[0])), C.long(len(ptrs)),
		C.long(size), C.int(threads), C.int(cycles)))
}

// TablePlaces returns how many places the pair cache's table of device 0
// has (paircache.c's pc_places).
func TablePlaces() int { return int(C.pc_places(0)) }
