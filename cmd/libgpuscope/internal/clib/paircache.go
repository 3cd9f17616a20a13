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

func (pairCache) Reset(i int, on bool, blocks *[foreign.PairCacheBlocks]uintptr) int {
	flag := C.int(0)
	if on {
		flag = 1
	}
	return int(C.pc_reset(C.int(i), flag, (*C.uintptr_t)(unsafe.Pointer(&blocks[0]))))
}

func (pairCache) Take(i int, blocks *[foreign.PairCacheBlocks]uintptr) int {
	return int(C.pc_take(C.int(i), (*C.uintptr_t)(unsafe.Pointer(&blocks[0]))))
}

func (pairCache) Hits(i int) int64 { return int64(C.pc_hits(C.int(i))) }

// The cache's size is foreign's.
var _ [C.PC_CACHED - foreign.PairCacheBlocks]struct{}
var _ [foreign.PairCacheBlocks - C.PC_CACHED]struct{}
var _ [C.PC_DEVICES - foreign.MaxDevices]struct{}
var _ [foreign.MaxDevices - C.PC_DEVICES]struct{}
