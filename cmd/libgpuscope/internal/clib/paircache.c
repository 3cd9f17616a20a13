// The pair cache: a library's alloc+free pair that the cache serves never
// crosses into Go. Per device, a table tracks every allocation made through
// gpuscope_alloc and gpuscope_cupy_malloc (its size, stream, scope and the
// id of its allocation in Go), and the cache keeps the blocks the library
// freed of them, the newest PC_CACHED, for the next allocation of the same
// size on the same stream in the same scope. A free into a full cache
// evicts its oldest block, which waits, with at most PC_RELEASED others, for
// the next crossing into Go to be freed there.
//
// Ownership: a block the table holds is the library's (live) or the
// cache's (cached, or evicted and waiting); Go frees a block the cache held
// only when the cache hands it back, by address and allocation id, and Go
// frees nothing whose allocation id is not that of the allocation live at
// that address (foreign's FreeID). A scope's end (pc_end) takes its blocks
// out of the cache and its entries out of the table, under the device's
// lock, before Go frees them, and the table tracks no allocation of a scope
// that has ended. docs/interop.md says how the figures stay exact.
//
// Every function is safe from any thread: a device's state is under its
// mutex.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "paircache.h"

enum { PC_TABLE_MIN = 1024 }; // a device's first table: places, a power of two

// An allocation the table tracks.
typedef struct {
	uintptr_t ptr; // 0: an empty place
	int64_t size;  // as the library asked for it
	uintptr_t stream;
	int64_t scope;    // the scope it belongs to (foreign's key: 0 is the device's root)
	uint64_t id;      // its allocation's id in Go
	uint8_t cached;   // the library freed it: it is in the cache
	uint8_t recorded; // record_stream named another stream for it: never cached
} pc_entry;

// A block in the cache, as the cache looks it up.
typedef struct {
	uintptr_t ptr;
	int64_t size;
	uintptr_t stream;
	int64_t scope;
	uint64_t id;
} pc_cached;

// A scope begun and not ended.
typedef struct {
	int64_t id;
	int track; // the table tracks its allocations
} pc_open;

typedef struct {
	pthread_mutex_t mu; // protects the fields below
	int on;             // tracking and caching; off, the table is empty (read without mu by off)
	pc_entry *table;    // cap places, open addressing, deletion by shifting back
	size_t cap, n;
	pc_cached cache[PC_CACHED]; // oldest first
	int ncached;
	pc_cached released[PC_RELEASED]; // evicted from the cache, for Go to free
	int nreleased;
	pc_open *open; // the scopes begun and not ended, besides the root, 0
	int nopen, capopen;
	int64_t hits, misses; // allocations the cache served, and those it did not
	char pad[64];         // devices on cache lines of their own
} pc_device;

static pc_device pc[PC_DEVICES] = {[0 ... PC_DEVICES - 1] = {.mu = PTHREAD_MUTEX_INITIALIZER}};

// active has bit i set while device i's cache is on: pc_record looks at
// those only, so that a program that never allocates through the entry
// points takes no lock of the cache's.
static uint64_t active;

// device returns device dev's state where its cache is on, else NULL,
// without its lock: a call where it is off takes none. A cache is off with
// an empty table, and a pointer the table tracks was allocated while it was
// on: a call that reads it off here, for such a pointer, finds no entry of
// it under the lock either.
static pc_device *device(int dev) {
	if ((unsigned)dev >= PC_DEVICES || !__atomic_load_n(&pc[dev].on, __ATOMIC_RELAXED)) {
		return NULL;
	}
	return &pc[dev];
}

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

// find returns ptr's entry in d's table, or NULL. Called with d->mu held.
static pc_entry *find(pc_device *d, uintptr_t ptr) {
	if (d->table == NULL) {
		return NULL;
	}
	size_t mask = d->cap - 1;
	for (size_t i = hash(ptr) & mask;; i = (i + 1) & mask) {
		if (d->table[i].ptr == ptr) {
			return &d->table[i];
		}
		if (d->table[i].ptr == 0) {
			return NULL;
		}
	}
}

// place returns where e goes in table, of cap places, which has room.
static size_t place(pc_entry *table, size_t cap, uintptr_t ptr) {
	size_t i = hash(ptr) & (cap - 1);
	while (table[i].ptr != 0 && table[i].ptr != ptr) {
		i = (i + 1) & (cap - 1);
	}
	return i;
}

// resize moves d's table to cap places, a power of two; 0 where memory
// ran out (the table is as it was). Called with d->mu held.
static int resize(pc_device *d, size_t cap) {
	pc_entry *t = calloc(cap, sizeof t[0]);
	if (t == NULL) {
		return 0;
	}
	for (size_t i = 0; i < d->cap; i++) {
		if (d->table[i].ptr != 0) {
			t[place(t, cap, d->table[i].ptr)] = d->table[i];
		}
	}
	free(d->table);
	d->table = t;
	d->cap = cap;
	return 1;
}

// grow doubles d's table, or makes its first; 0 where memory ran out (the
// table is as it was). Called with d->mu held.
static int grow(pc_device *d) { return resize(d, d->cap == 0 ? PC_TABLE_MIN : 2 * d->cap); }

// shrink makes d's table smaller where it is less than an eighth full, to
// about a quarter, so that a burst of live allocations does not leave it
// large for good: every scope's end reads it whole, under d->mu. Called
// with d->mu held, never while the caller walks the table's places.
static void shrink(pc_device *d) {
	if (d->cap > PC_TABLE_MIN && 8 * d->n < d->cap) {
		size_t cap = PC_TABLE_MIN;
		while (cap < 4 * d->n) {
			cap *= 2;
		}
		resize(d, cap); // where memory ran out, the table stays as large
	}
}

// removeAt deletes the entry at place i, moving later entries of its probe
// run back so that no lookup stops early; an entry from later may then sit
// at i. Called with d->mu held; shrink after.
static void removeAt(pc_device *d, size_t i) {
	size_t mask = d->cap - 1;
	for (size_t j = i;;) {
		j = (j + 1) & mask;
		if (d->table[j].ptr == 0) {
			break;
		}
		size_t k = hash(d->table[j].ptr) & mask;
		if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j)) {
			continue; // its home is cyclically in (i, j]: it stays
		}
		d->table[i] = d->table[j];
		i = j;
	}
	memset(&d->table[i], 0, sizeof d->table[i]);
	d->n--;
}

// forget deletes ptr's entry from d's table. Called with d->mu held.
static void forget(pc_device *d, uintptr_t ptr) {
	pc_entry *e = find(d, ptr);
	if (e != NULL) {
		removeAt(d, (size_t)(e - d->table));
	}
}

// uncache takes the block at place k out of the cache, keeping the order of
// the rest. Called with d->mu held.
static void uncache(pc_device *d, int k) {
	if (--d->ncached > k) { // the newest, the one a pair takes back, moves nothing
		memmove(&d->cache[k], &d->cache[k + 1], (size_t)(d->ncached - k) * sizeof d->cache[0]);
	}
}

// drain moves the evicted blocks to out, returning how many. Called with
// d->mu held.
static int drain(pc_device *d, pc_block *out) {
	int n = d->nreleased;
	for (int k = 0; k < n; k++) {
		out[k] = (pc_block){d->released[k].ptr, d->released[k].id};
	}
	d->nreleased = 0;
	return n;
}

// takeAll moves every block the cache holds, and the evicted ones, to out
// (PC_OUT places), forgetting them, and returns how many. Called with d->mu
// held.
static int takeAll(pc_device *d, pc_block *out) {
	int n = drain(d, out);
	for (int k = 0; k < d->ncached; k++) {
		out[n++] = (pc_block){d->cache[k].ptr, d->cache[k].id};
		forget(d, d->cache[k].ptr);
	}
	d->ncached = 0;
	shrink(d);
	return n;
}

// evicted reports whether ptr is a block the cache evicted, waiting to go
// to Go: the library freed it. Called with d->mu held.
static int evicted(pc_device *d, uintptr_t ptr) {
	for (int k = 0; k < d->nreleased; k++) {
		if (d->released[k].ptr == ptr) {
			return 1;
		}
	}
	return 0;
}

// openAt returns where scope is in d's open scopes, or -1; the root, 0,
// is always open, at d->nopen. Called with d->mu held.
static int openAt(pc_device *d, int64_t scope) {
	if (scope == 0) {
		return d->nopen;
	}
	for (int k = 0; k < d->nopen; k++) {
		if (d->open[k].id == scope) {
			return k;
		}
	}
	return -1;
}

// pc_alloc returns a block of size bytes for stream in scope from device
// dev's cache, or NULL. On NULL, out (PC_RELEASED places) holds *nout
// blocks the cache evicted, for Go to free before it allocates, and
// *ncached says how many the cache still holds.
void *pc_alloc(int dev, int64_t scope, ssize_t size, uintptr_t stream, pc_block *out, int *nout, int *ncached) {
	*nout = 0, *ncached = 0;
	pc_device *d = device(dev);
	if (d == NULL) {
		return NULL;
	}
	pthread_mutex_lock(&d->mu);
	for (int k = d->ncached - 1; k >= 0; k--) {
		pc_cached *c = &d->cache[k];
		if (c->size == size && c->stream == stream && c->scope == scope) {
			uintptr_t ptr = c->ptr;
			uncache(d, k);
			find(d, ptr)->cached = 0;
			d->hits++;
			pthread_mutex_unlock(&d->mu);
			return (void *)ptr;
		}
	}
	*nout = drain(d, out);
	*ncached = d->ncached;
	d->misses++;
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

// pc_track notes an allocation that Go made in scope, of id id, where the
// cache is on and tracks the scope's allocations, and returns 0. Where no
// memory is left for a larger table it notes nothing: the allocation's
// free then crosses into Go. PC_ENDED: the cache is on and scope has
// ended since Go allocated (pc_end): its end may have freed the
// allocation, which the caller must not hand out before Go says (Settle).
int pc_track(int dev, uintptr_t ptr, ssize_t size, uintptr_t stream, int64_t scope, uint64_t id) {
	pc_device *d = device(dev);
	if (d == NULL || ptr == 0) {
		return 0;
	}
	pthread_mutex_lock(&d->mu);
	int k = openAt(d, scope), r = 0;
	if (!d->on) {
		// turned off meanwhile
	} else if (k < 0) {
		r = PC_ENDED;
	} else if ((k == d->nopen || d->open[k].track) && (2 * (d->n + 1) <= d->cap || grow(d))) {
		pc_entry *e = &d->table[place(d->table, d->cap, ptr)];
		if (e->ptr == 0) {
			d->n++;
		}
		*e = (pc_entry){.ptr = ptr, .size = size, .stream = stream, .scope = scope, .id = id};
	}
	pthread_mutex_unlock(&d->mu);
	return r;
}

// pc_free keeps ptr in device dev's cache (PC_KEPT) where it is a live
// allocation the table tracks, freed with its size (size < 0: CuPy's free,
// which gives none) and stream, never recorded on another stream. Where
// the cache is full its oldest block is evicted, and where PC_RELEASED
// evicted blocks wait, out (PC_RELEASED places) holds them, *nout, for Go
// to free now. PC_FREED: ptr is in the cache, or evicted and waiting,
// freed already. PC_PASS: Go is
// to free it, or say why not; the table forgets it, and *id is its
// allocation's id (0 where the table had none).
int pc_free(int dev, uintptr_t ptr, ssize_t size, uintptr_t stream, uint64_t *id, pc_block *out, int *nout) {
	*id = 0, *nout = 0;
	pc_device *d = device(dev);
	if (d == NULL) {
		return PC_PASS;
	}
	pthread_mutex_lock(&d->mu);
	pc_entry *e = find(d, ptr);
	int r = PC_PASS;
	if (e == NULL) {
		r = evicted(d, ptr) ? PC_FREED : PC_PASS; // else not tracked
	} else if (e->cached) {
		r = PC_FREED;
	} else if ((size >= 0 && e->size != size) || e->stream != stream || e->recorded) {
		*id = e->id;
		removeAt(d, (size_t)(e - d->table));
		shrink(d);
	} else {
		e->cached = 1;
		pc_cached c = {ptr, e->size, stream, e->scope, e->id};
		if (d->ncached == PC_CACHED) {
			d->released[d->nreleased++] = d->cache[0];
			forget(d, d->cache[0].ptr);
			uncache(d, 0);
			shrink(d);
		}
		d->cache[d->ncached++] = c;
		if (d->nreleased == PC_RELEASED) {
			*nout = drain(d, out);
		}
		r = PC_KEPT;
	}
	pthread_mutex_unlock(&d->mu);
	return r;
}

// pc_record prepares a record_stream of ptr on stream, on any device:
// PC_FREED where ptr is in a cache, or evicted and waiting; else, where
// stream is not the allocation's own (whose record does nothing), the
// table marks it never to be cached, and it returns PC_PASS.
int pc_record(uintptr_t ptr, uintptr_t stream) {
	uint64_t on = __atomic_load_n(&active, __ATOMIC_ACQUIRE);
	for (int k = 0; on != 0; k++, on >>= 1) {
		pc_device *d = (on & 1) ? device(k) : NULL;
		if (d == NULL) {
			continue;
		}
		pthread_mutex_lock(&d->mu);
		pc_entry *e = find(d, ptr);
		int r = PC_PASS;
		if ((e != NULL && e->cached) || (e == NULL && evicted(d, ptr))) {
			r = PC_FREED;
		} else if (e != NULL && e->stream != stream) {
			e->recorded = 1;
		}
		pthread_mutex_unlock(&d->mu);
		if (r == PC_FREED || e != NULL) {
			return r;
		}
	}
	return PC_PASS;
}

// pc_begin notes that scope has begun on device dev. The table tracks
// allocations of scopes begun, where track says, and not ended only: the
// cache serves none of an untracked scope's (GPUSCOPE_PAIR_CACHE=0 as it
// began, a scope whose memory sleeps), nor of one that ended, whose id a
// thread may still name.
void pc_begin(int dev, int64_t scope, int track) {
	if ((unsigned)dev >= PC_DEVICES) {
		return;
	}
	pc_device *d = &pc[dev];
	pthread_mutex_lock(&d->mu);
	if (scope != 0 && openAt(d, scope) < 0) {
		if (d->nopen == d->capopen) {
			int cap = d->capopen == 0 ? 16 : 2 * d->capopen;
			pc_open *open = realloc(d->open, (size_t)cap * sizeof open[0]);
			if (open == NULL) {
				goto unlock; // its allocations read as ended's: Go settles each, untracked
			}
			d->open = open;
			d->capopen = cap;
		}
		d->open[d->nopen++] = (pc_open){scope, track};
	}
unlock:
	pthread_mutex_unlock(&d->mu);
}

// pc_end ends scope on device dev: its blocks leave the cache, with the
// evicted ones, into out (PC_OUT places), for Go to free, and it returns
// how many; the table forgets its live allocations where free_live says
// Go frees them, else they become parent's.
int pc_end(int dev, int64_t scope, int64_t parent, int free_live, pc_block *out) {
	if ((unsigned)dev >= PC_DEVICES) {
		return 0;
	}
	pc_device *d = &pc[dev];
	pthread_mutex_lock(&d->mu);
	int at = openAt(d, scope);
	if (at >= 0 && at < d->nopen) {
		d->open[at] = d->open[--d->nopen];
	}
	int n = drain(d, out);
	for (int k = 0; k < d->ncached;) {
		if (d->cache[k].scope == scope) {
			out[n++] = (pc_block){d->cache[k].ptr, d->cache[k].id};
			forget(d, d->cache[k].ptr);
			uncache(d, k);
		} else {
			k++;
		}
	}
	for (size_t i = 0; i < d->cap;) {
		if (d->table[i].ptr != 0 && d->table[i].scope == scope) {
			if (free_live) {
				removeAt(d, i);
				continue; // an entry from later may now sit at i: look again
			}
			d->table[i].scope = parent;
		}
		i++;
	}
	shrink(d);
	pthread_mutex_unlock(&d->mu);
	return n;
}

// pc_set turns device dev's cache on or off. Turning it off empties the
// table and the cache: the blocks the cache held go to out (PC_OUT places),
// for Go to free, and it returns how many.
int pc_set(int dev, int on, pc_block *out) {
	if ((unsigned)dev >= PC_DEVICES) {
		return 0;
	}
	pc_device *d = &pc[dev];
	pthread_mutex_lock(&d->mu);
	int n = takeAll(d, out);
	if (d->table != NULL) {
		memset(d->table, 0, d->cap * sizeof d->table[0]);
	}
	d->n = 0;
	on = on && (d->table != NULL || grow(d));
	if (on) {
		__atomic_fetch_or(&active, (uint64_t)1 << dev, __ATOMIC_RELEASE);
	} else {
		__atomic_fetch_and(&active, ~((uint64_t)1 << dev), __ATOMIC_RELEASE);
	}
	__atomic_store_n(&d->on, on, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&d->mu);
	return n;
}

// pc_reset forgets device dev: its cache off and empty, no scope open, its
// counts 0. Go frees what the cache held, since it frees everything.
void pc_reset(int dev) {
	if ((unsigned)dev >= PC_DEVICES) {
		return;
	}
	pc_block out[PC_OUT];
	pc_set(dev, 0, out);
	pc_device *d = &pc[dev];
	pthread_mutex_lock(&d->mu);
	d->nopen = 0;
	d->hits = 0, d->misses = 0;
	pthread_mutex_unlock(&d->mu);
}

// pc_take empties device dev's cache into out (PC_OUT places) and returns
// how many blocks.
int pc_take(int dev, pc_block *out) {
	pc_device *d = device(dev);
	if (d == NULL) {
		return 0;
	}
	pthread_mutex_lock(&d->mu);
	int n = takeAll(d, out);
	pthread_mutex_unlock(&d->mu);
	return n;
}

// pc_list shows the blocks device dev's cache holds, those it evicted
// first, oldest first, in out (PC_OUT places), and returns how many.
int pc_list(int dev, pc_view *out) {
	pc_device *d = device(dev);
	if (d == NULL) {
		return 0;
	}
	pthread_mutex_lock(&d->mu);
	int n = 0;
	for (int k = 0; k < d->nreleased; k++, n++) {
		pc_cached *c = &d->released[k];
		out[n] = (pc_view){c->ptr, c->id, c->scope, c->size, c->stream};
	}
	for (int k = 0; k < d->ncached; k++, n++) {
		pc_cached *c = &d->cache[k];
		out[n] = (pc_view){c->ptr, c->id, c->scope, c->size, c->stream};
	}
	pthread_mutex_unlock(&d->mu);
	return n;
}

// pc_evict takes ptr out of device dev's cache into *out, and returns 1, or
// 0 where the cache holds it no longer.
int pc_evict(int dev, uintptr_t ptr, pc_block *out) {
	pc_device *d = device(dev);
	if (d == NULL) {
		return 0;
	}
	pthread_mutex_lock(&d->mu);
	int n = 0;
	for (int k = 0; k < d->nreleased && n == 0; k++) {
		if (d->released[k].ptr == ptr) {
			*out = (pc_block){ptr, d->released[k].id};
			d->released[k] = d->released[--d->nreleased];
			n = 1;
		}
	}
	for (int k = 0; k < d->ncached && n == 0; k++) {
		if (d->cache[k].ptr == ptr) {
			*out = (pc_block){ptr, d->cache[k].id};
			forget(d, ptr);
			uncache(d, k);
			n = 1;
		}
	}
	shrink(d);
	pthread_mutex_unlock(&d->mu);
	return n;
}

// pc_places returns how many places device dev's table has: it grows
// with what it tracks, and shrinks again.
size_t pc_places(int dev) {
	if ((unsigned)dev >= PC_DEVICES) {
		return 0;
	}
	pc_device *d = &pc[dev];
	pthread_mutex_lock(&d->mu);
	size_t n = d->cap;
	pthread_mutex_unlock(&d->mu);
	return n;
}

// pc_counts reads how many allocations device dev's cache served, and how
// many it looked at.
void pc_counts(int dev, int64_t *hits, int64_t *allocs) {
	*hits = 0, *allocs = 0;
	if ((unsigned)dev >= PC_DEVICES) {
		return;
	}
	pc_device *d = &pc[dev];
	pthread_mutex_lock(&d->mu);
	*hits = d->hits, *allocs = d->hits + d->misses;
	pthread_mutex_unlock(&d->mu);
}
