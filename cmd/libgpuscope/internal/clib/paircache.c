// The pair cache: a library's alloc+free pair that the cache serves never
// crosses into Go. Per device, it tracks the allocations made through
// gpuscope_alloc (a table from address to size, stream and scope), and
// keeps the blocks the library freed of them, at most PC_CACHED, for the
// next allocation of the same size on the same stream in the same scope
// (scopes.c says which scope a call allocates in). To Go a cached block is
// still an allocation of its scope, so it never serves another; Go takes
// the cache's blocks back, and frees them, before every allocation the
// cache did not serve (pc_alloc's flush), when a scope ends, and before the
// device's figures are read or its pool is short (pc_take). docs/interop.md
// says why that keeps the figures exact.
//
// Every function is safe from any thread: a device's state is under its
// mutex. GPUSCOPE_PAIR_CACHE=0 turns the cache off, for devices opened
// after.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "paircache.h"

enum { PC_TABLE = 8192 }; // places in a device's table; at most half are used

// An allocation made in the scope the cache serves, live or in the cache.
typedef struct {
	uintptr_t ptr; // 0: an empty place
	int64_t size;  // as the library asked for it
	uintptr_t stream;
	int64_t scope;    // the scope it was allocated in (scopes.c's id; 0: the root)
	uint8_t cached;   // the library freed it: it is in the cache
	uint8_t recorded; // record_stream named another stream for it: never cached
} pc_entry;

typedef struct {
	uintptr_t ptr;
	int64_t size;
	uintptr_t stream;
	int64_t scope;
} pc_block;

typedef struct {
	pthread_mutex_t mu; // protects the fields below
	uint64_t on;        // 0: off, nothing tracked (see off)
	pc_entry *table;    // PC_TABLE places, open addressing, deletion by shifting back
	int n;              // entries in table
	pc_block cached[PC_CACHED];
	int ncached;
	int64_t hits; // allocations the cache served
	char pad[64]; // devices on cache lines of their own
} pc_device;

static pc_device fc[PC_DEVICES] = {[0 ... PC_DEVICES - 1] = {.mu = PTHREAD_MUTEX_INITIALIZER}};

// active has bit i set once device i has a table: pc_forget of any device
// looks at those only, so that a program that never calls gpuscope_alloc
// takes no lock of the cache's.
static uint64_t active;

// off reports whether d's cache is off, without its lock, so that a call
// where it is off takes none. A cache is off with an empty table, and an
// allocation it tracks is made after it was turned on: a call that reads 0
// here, for a pointer the library got from gpuscope_alloc, finds no entry
// of it under the lock either. Written under d->mu, by pc_reset.
static int off(pc_device *d) { return __atomic_load_n(&d->on, __ATOMIC_RELAXED) == 0; }

// hash mixes an address (a multiple of 512 bytes) over 64 bits:
// splitmix64's finalizer, as foreign's table.
static uint64_t hash(uintptr_t ptr) {
	uint64_t x = ptr;
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ x >> 31;
}

// find returns ptr's place in d's table, or -1. Called with d->mu held.
static int find(pc_device *d, uintptr_t ptr) {
	if (d->table == NULL) {
		return -1;
	}
	for (uint64_t i = hash(ptr) & (PC_TABLE - 1);; i = (i + 1) & (PC_TABLE - 1)) {
		if (d->table[i].ptr == ptr) {
			return (int)i;
		}
		if (d->table[i].ptr == 0) {
			return -1;
		}
	}
}

// removeAt deletes the entry at place i, moving later entries of its probe
// run back so that no lookup stops early. Called with d->mu held.
static void removeAt(pc_device *d, int i) {
	for (int j = i;;) {
		j = (j + 1) & (PC_TABLE - 1);
		if (d->table[j].ptr == 0) {
			break;
		}
		int k = (int)(hash(d->table[j].ptr) & (PC_TABLE - 1));
		if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j)) {
			continue; // its home is cyclically in (i, j]: it stays
		}
		d->table[i] = d->table[j];
		i = j;
	}
	memset(&d->table[i], 0, sizeof d->table[i]);
	d->n--;
}

// takeLocked moves the cache's blocks to out, forgetting them. Called with
// d->mu held.
static int takeLocked(pc_device *d, uintptr_t *out) {
	int n = d->ncached;
	for (int k = 0; k < n; k++) {
		out[k] = d->cached[k].ptr;
		int i = find(d, out[k]);
		if (i >= 0) {
			removeAt(d, i);
		}
	}
	d->ncached = 0;
	return n;
}

// pc_alloc returns a block of size bytes for stream in scope from device
// dev's cache, or NULL. On NULL, the cache's blocks are in flush
// (PC_CACHED places), *nflush of them, for Go to free before it allocates.
void *pc_alloc(int dev, int64_t scope, ssize_t size, uintptr_t stream, uintptr_t *flush, int *nflush) {
	*nflush = 0;
	if ((unsigned)dev >= PC_DEVICES) {
		return NULL;
	}
	pc_device *d = &fc[dev];
	if (off(d)) {
		return NULL;
	}
	pthread_mutex_lock(&d->mu);
	for (int k = d->ncached - 1; k >= 0; k--) {
		pc_block *b = &d->cached[k];
		if (b->size == size && b->stream == stream && b->scope == scope) {
			uintptr_t ptr = b->ptr;
			*b = d->cached[--d->ncached];
			d->table[find(d, ptr)].cached = 0;
			d->hits++;
			pthread_mutex_unlock(&d->mu);
			return (void *)ptr;
		}
	}
	*nflush = takeLocked(d, flush);
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

// pc_track notes an allocation that Go made in scope, where the cache is
// on and its table has room.
void pc_track(int dev, uintptr_t ptr, ssize_t size, uintptr_t stream, int64_t scope) {
	if ((unsigned)dev >= PC_DEVICES || ptr == 0 || off(&fc[dev])) {
		return;
	}
	pc_device *d = &fc[dev];
	pthread_mutex_lock(&d->mu);
	if (d->on && d->table != NULL && 2 * (d->n + 1) <= PC_TABLE) {
		uint64_t i = hash(ptr) & (PC_TABLE - 1);
		while (d->table[i].ptr != 0 && d->table[i].ptr != ptr) {
			i = (i + 1) & (PC_TABLE - 1);
		}
		if (d->table[i].ptr == 0) {
			d->n++;
		}
		d->table[i] = (pc_entry){.ptr = ptr, .size = size, .stream = stream, .scope = scope};
	}
	pthread_mutex_unlock(&d->mu);
}

// pc_free keeps ptr in device dev's cache (PC_KEPT) where it is a live
// allocation the table tracks, freed with its size and stream, never
// recorded on another stream, and the cache has room. PC_FREED: it is in
// the cache, freed already. PC_PASS: Go is to free it; the table forgets
// it, whether Go's free succeeds or not.
int pc_free(int dev, uintptr_t ptr, ssize_t size, uintptr_t stream) {
	if ((unsigned)dev >= PC_DEVICES || off(&fc[dev])) {
		return PC_PASS;
	}
	pc_device *d = &fc[dev];
	pthread_mutex_lock(&d->mu);
	int i = find(d, ptr);
	int r = PC_PASS;
	if (i >= 0) {
		pc_entry *e = &d->table[i];
		if (e->cached) {
			r = PC_FREED;
		} else if (e->size == size && e->stream == stream && !e->recorded && d->ncached < PC_CACHED) {
			e->cached = 1;
			d->cached[d->ncached++] = (pc_block){ptr, size, stream, e->scope};
			r = PC_KEPT;
		} else {
			removeAt(d, i);
		}
	}
	pthread_mutex_unlock(&d->mu);
	return r;
}

// pc_forget prepares a call that Go serves for ptr, on device dev (< 0:
// any): PC_FREED where ptr is in a cache; else the table forgets ptr, or,
// for record_stream (record != 0), marks it never to be cached, and it
// returns PC_PASS.
int pc_forget(int dev, uintptr_t ptr, int record) {
	int lo = dev, hi = dev + 1;
	if (dev < 0) {
		lo = 0, hi = PC_DEVICES;
	} else if (dev >= PC_DEVICES) {
		return PC_PASS;
	}
	uint64_t on = __atomic_load_n(&active, __ATOMIC_ACQUIRE);
	for (int k = lo; k < hi; k++) {
		pc_device *d = &fc[k];
		if ((on >> k & 1) == 0 || off(d)) {
			continue;
		}
		pthread_mutex_lock(&d->mu);
		int i = find(d, ptr);
		if (i >= 0) {
			int r = PC_PASS;
			if (d->table[i].cached) {
				r = PC_FREED;
			} else if (record) {
				d->table[i].recorded = 1;
			} else {
				removeAt(d, i);
			}
			pthread_mutex_unlock(&d->mu);
			return r;
		}
		pthread_mutex_unlock(&d->mu);
	}
	return PC_PASS;
}

// pc_reset empties device dev's cache into out (PC_CACHED places),
// returning how many blocks, and turns it on (with an empty table) or off.
int pc_reset(int dev, int on, uintptr_t *out) {
	if ((unsigned)dev >= PC_DEVICES) {
		return 0;
	}
	const char *off = getenv("GPUSCOPE_PAIR_CACHE");
	if (off != NULL && strcmp(off, "0") == 0) {
		on = 0;
	}
	pc_device *d = &fc[dev];
	pthread_mutex_lock(&d->mu);
	int n = takeLocked(d, out);
	if (d->table != NULL) {
		memset(d->table, 0, PC_TABLE * sizeof d->table[0]);
	} else if (on) {
		d->table = calloc(PC_TABLE, sizeof d->table[0]);
		if (d->table != NULL) {
			__atomic_fetch_or(&active, (uint64_t)1 << dev, __ATOMIC_RELEASE);
		}
	}
	d->n = 0;
	__atomic_store_n(&d->on, d->table != NULL && on ? 1 : 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&d->mu);
	return n;
}

// pc_take empties device dev's cache into out (PC_CACHED places) and
// returns how many blocks.
int pc_take(int dev, uintptr_t *out) {
	if ((unsigned)dev >= PC_DEVICES) {
		return 0;
	}
	pc_device *d = &fc[dev];
	pthread_mutex_lock(&d->mu);
	int n = takeLocked(d, out);
	pthread_mutex_unlock(&d->mu);
	return n;
}

// pc_hits returns how many allocations device dev's cache served.
int64_t pc_hits(int dev) {
	if ((unsigned)dev >= PC_DEVICES) {
		return 0;
	}
	pc_device *d = &fc[dev];
	pthread_mutex_lock(&d->mu);
	int64_t n = d->hits;
	pthread_mutex_unlock(&d->mu);
	return n;
}
