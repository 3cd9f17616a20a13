// The pair cache of the C entry points (paircache.c): the table of the
// allocations made through gpuscope_alloc and gpuscope_cupy_malloc, and the
// blocks the library freed of them, kept on the C side of the crossing for
// its next allocation of the same size on the same stream in the same scope
// (scopes.c says which scope a call allocates in).
#ifndef GPUSCOPE_PAIRCACHE_H
#define GPUSCOPE_PAIRCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
	PC_DEVICES = 64,                      // foreign.MaxDevices
	PC_CACHED = 32,                       // blocks a device's cache keeps to serve: foreign.PairCacheBlocks
	PC_RELEASED = 32,                     // blocks it evicted, to go to Go at the next crossing
	PC_OUT = PC_CACHED + PC_RELEASED,     // the most blocks one call hands to Go: foreign.PairCacheOut
};

// A block the cache hands back for Go to free: its address and the id of
// its allocation, which Go frees only while that allocation is live.
typedef struct {
	uintptr_t ptr;
	uint64_t id;
} pc_block;

// A block the cache holds, as pc_list shows it.
typedef struct {
	uintptr_t ptr;
	uint64_t id;
	int64_t scope;
	int64_t size;
	uintptr_t stream;
} pc_view;

// What pc_free, pc_record and pc_track found.
enum {
	PC_PASS = 0,  // not cached: Go frees it, or says why not
	PC_KEPT = 1,  // pc_free kept it in the cache
	PC_FREED = 2, // it is in the cache, or evicted and waiting: the library freed it already
	PC_ENDED = 3, // pc_track: the scope ended since Go allocated
};

// Not exported from libgpuscope.so: gpuscope.h's names are all it exports.
#define PC_INTERNAL __attribute__((visibility("hidden")))

PC_INTERNAL void *pc_alloc(int dev, int64_t scope, ssize_t size, uintptr_t stream, pc_block *out, int *nout, int *ncached);
PC_INTERNAL int pc_track(int dev, uintptr_t ptr, ssize_t size, uintptr_t stream, int64_t scope, uint64_t id);
PC_INTERNAL int pc_free(int dev, uintptr_t ptr, ssize_t size, uintptr_t stream, uint64_t *id, pc_block *out, int *nout);
PC_INTERNAL int pc_record(uintptr_t ptr, uintptr_t stream);
PC_INTERNAL void pc_begin(int dev, int64_t scope, int track);
PC_INTERNAL int pc_end(int dev, int64_t scope, int64_t parent, int free_live, pc_block *out);
PC_INTERNAL int pc_set(int dev, int on, pc_block *out);
PC_INTERNAL void pc_reset(int dev);
PC_INTERNAL int pc_take(int dev, pc_block *out);
PC_INTERNAL int pc_list(int dev, pc_view *out);
PC_INTERNAL int pc_evict(int dev, uintptr_t ptr, pc_block *out);
PC_INTERNAL void pc_counts(int dev, int64_t *hits, int64_t *allocs);
PC_INTERNAL size_t pc_places(int dev);

#endif
