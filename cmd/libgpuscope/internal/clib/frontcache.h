// The front cache of the C entry points (frontcache.c): the blocks a
// library freed through gpuscope_free, kept on the C side of the crossing
// for its next allocation of the same size on the same stream.
#ifndef GPUSCOPE_FRONTCACHE_H
#define GPUSCOPE_FRONTCACHE_H

#include <stdint.h>
#include <sys/types.h>

enum {
	FC_DEVICES = 64, // foreign.MaxDevices
	FC_CACHED = 32,  // blocks a device's cache holds at most: foreign.FrontCacheBlocks
};

// What fc_free and fc_forget found.
enum {
	FC_PASS = 0,  // not cached: Go frees it, or says why not
	FC_KEPT = 1,  // fc_free kept it in the cache
	FC_FREED = 2, // it is in the cache: the library freed it already
};

// Not exported from libgpuscope.so: gpuscope.h's names are all it exports.
#define FC_INTERNAL __attribute__((visibility("hidden")))

FC_INTERNAL void *fc_alloc(int dev, ssize_t size, uintptr_t stream, uintptr_t *flush, int *nflush);
FC_INTERNAL void fc_track(int dev, uintptr_t ptr, ssize_t size, uintptr_t stream, uint64_t tok);
FC_INTERNAL int fc_free(int dev, uintptr_t ptr, ssize_t size, uintptr_t stream);
FC_INTERNAL int fc_forget(int dev, uintptr_t ptr, int record);
FC_INTERNAL int fc_reset(int dev, uint64_t tok, uintptr_t *out);
FC_INTERNAL int fc_take(int dev, uintptr_t *out);
FC_INTERNAL int64_t fc_hits(int dev);

#endif
