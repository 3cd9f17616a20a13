package capi

/*
#include "frontcache.h"
*/
import "C"

import (
	"unsafe"

	"github.com/gpuscope/gpuscope/gpu/internal/foreign"
)

// frontCache is frontcache.c, the C side's cache of freed blocks, as
// package foreign drives it.
type frontCache struct{}

func init() {
	// The cache lives in C memory and is used only through the C entry
	// points of this package: nothing is cached until one is called.
	foreign.SetFrontCache(frontCache{})
}

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
