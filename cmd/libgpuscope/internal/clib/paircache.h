// The pair cache of the C entry points (paircache.c): the blocks a
// library freed through gpuscope_free, kept on the C side of the crossing
// for its next allocation of the same size on the same stream.
#ifndef GPUSCOPE_PAIRCACHE_H
#define GPUSCOPE_PAIRCACHE_H

#include <stdint.h>
#include <sys/types.h>

enum {
	PC_DEVICES = 64, // foreign.MaxDevices
	PC_CACHED = 32,  // blocks a device's cache holds at most: foreign.PairCacheBlocks
};

// What pc_free and pc_forget found.
enum {
	PC_PASS = 0,  // not cached: Go frees it, or says why not
	PC_KEPT = 1,  // pc_free kept it in the cache
	PC_FREED = 2, // it is in the cache: the library freed it already
};

// Not exported from libgpuscope.so: gpuscope.h's names are all it exports.
#define PC_INTERNAL __attribute__((visibility("hidden")))

PC_INTERNAL void *pc_alloc(int dev, int64_t scope, ssize_t size, uintptr_t stream, uintptr_t *flush, int *nflush);
PC_INTERNAL void pc_track(int dev, uintptr_t ptr, ssize_t size, uintptr_t stream, int64_t scope);
PC_INTERNAL int pc_free(int dev, uintptr_t ptr, ssize_t size, uintptr_t stream);
PC_INTERNAL int pc_forget(int dev, uintptr_t ptr, int record);
PC_INTERNAL int pc_reset(int dev, int on, uintptr_t *out);
PC_INTERNAL int pc_take(int dev, uintptr_t *out);
PC_INTERNAL int64_t pc_hits(int dev);

#endif
