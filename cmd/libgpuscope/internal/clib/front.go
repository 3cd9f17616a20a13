package clib

/*
#include "frontcache.h"
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/foreign"
)

// frontCache is frontcache.c, the C side's cache of freed blocks, as
// package foreign drives it.
type frontCache struct{}

// frontCacheSet is done once the front cache is set (useFrontCache).
var frontCacheSet sync.Once

// useFrontCache puts frontcache.c in front of the devices that the entry
// points open, once, before the first of them opens one: the cache lives
// in C memory and is used only through this package's entry points, so
// that a program that links none has none.
func useFrontCache() { frontCacheSet.Do(func() { foreign.SetFrontCache(frontCache{}) }) }

func (frontCache) Reset(i int, tok uint64, blocks *[foreign.FrontCacheBlocks]uintptr) int {
	return int(C.fc_reset(C.int(i), C.uint64_t(tok), (*C.uintptr_t)(unsafe.Pointer(&blocks[0]))))
}

func (frontCache) Take(i int, blocks *[foreign.FrontCacheBlocks]uintptr) int {
	return int(C.fc_take(C.int(i), (*C.uintptr_t)(unsafe.Pointer(&blocks[0]))))
}

func (frontCache) Hits(i int) int64 { return int64(C.fc_hits(C.int(i))) }

// The cache's size is foreign's.
var _ [C.FC_CACHED - foreign.FrontCacheBlocks]struct{}
var _ [foreign.FrontCacheBlocks - C.FC_CACHED]struct{}
var _ [C.FC_DEVICES - foreign.MaxDevices]struct{}
var _ [foreign.MaxDevices - C.FC_DEVICES]struct{}
