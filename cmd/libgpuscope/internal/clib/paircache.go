package clib

/*
#include "paircache.h"
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/foreign"
)

// pairCache is paircache.c, the C side's cache of freed blocks, as
// package foreign drives it.
type pairCache struct{}

// pairCacheSet is done once the pair cache is set (usePairCache).
var pairCacheSet sync.Once

// usePairCache puts paircache.c in front of the devices that the entry
// points open, once, before the first of them opens one: the cache lives
// in C memory and is used only through this package's entry points, so
// that a program that links none has none.
func usePairCache() { pairCacheSet.Do(func() { foreign.SetPairCache(pairCache{}) }) }

func (pairCache) Set(i int, on bool, out *[foreign.PairCacheOut]foreign.Block) int {
	return int(C.pc_set(C.int(i), cBool(on), (*C.pc_block)(unsafe.Pointer(&out[0]))))
}

func (pairCache) Reset(i int) { C.pc_reset(C.int(i)) }

func (pairCache) Begin(i int, scope int64, track bool) {
	C.pc_begin(C.int(i), C.int64_t(scope), cBool(track))
}

func (pairCache) End(i int, scope, parent int64, freeLive bool, out *[foreign.PairCacheOut]foreign.Block) int {
	return int(C.pc_end(C.int(i), C.int64_t(scope), C.int64_t(parent), cBool(freeLive), (*C.pc_block)(unsafe.Pointer(&out[0]))))
}

func (pairCache) Take(i int, out *[foreign.PairCacheOut]foreign.Block) int {
	return int(C.pc_take(C.int(i), (*C.pc_block)(unsafe.Pointer(&out[0]))))
}

func (pairCache) List(i int, out *[foreign.PairCacheOut]foreign.Cached) int {
	return int(C.pc_list(C.int(i), (*C.pc_view)(unsafe.Pointer(&out[0]))))
}

func (pairCache) Evict(i int, ptr uintptr) (foreign.Block, bool) {
	var b foreign.Block
	ok := C.pc_evict(C.int(i), C.uintptr_t(ptr), (*C.pc_block)(unsafe.Pointer(&b))) != 0
	return b, ok
}

func (pairCache) Counts(i int) (hits, allocs int64) {
	var h, a C.int64_t
	C.pc_counts(C.int(i), &h, &a)
	return int64(h), int64(a)
}

// cBool is b as C's int.
func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// A pc_view is a foreign.Cached.
var _ [unsafe.Sizeof(C.pc_view{}) - unsafe.Sizeof(foreign.Cached{})]struct{}
var _ [unsafe.Sizeof(foreign.Cached{}) - unsafe.Sizeof(C.pc_view{})]struct{}

// The cache's sizes are foreign's.
var _ [C.PC_CACHED - foreign.PairCacheBlocks]struct{}
var _ [foreign.PairCacheBlocks - C.PC_CACHED]struct{}
var _ [C.PC_OUT - foreign.PairCacheOut]struct{}
var _ [foreign.PairCacheOut - C.PC_OUT]struct{}
var _ [C.PC_DEVICES - foreign.MaxDevices]struct{}
var _ [foreign.MaxDevices - C.PC_DEVICES]struct{}
