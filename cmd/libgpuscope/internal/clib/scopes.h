// What clib keeps per thread and per stream (scopes.c): the scopes a call
// allocates in, the calling thread's last failure, and whether the process
// is a child of a fork.
#ifndef GPUSCOPE_SCOPES_H
#define GPUSCOPE_SCOPES_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "paircache.h" // PC_INTERNAL, PC_DEVICES

enum {
	GS_DEPTH = 128, // scopes a thread may have open at once, over every device
	GS_BOUND = 64,  // bindings of streams to scopes a device may have at once
};

// What clib keeps for a thread (scopes.c).
typedef struct {
	int n; // scopes open, innermost last
	struct {
		int dev;
		int64_t id;
	} e[GS_DEPTH];
	int kind;       // the last failure's
	char msg[4096]; // its first 4095 bytes
} gs_thread;

PC_INTERNAL extern pthread_key_t gs_key; // a thread's gs_thread
PC_INTERNAL extern int gs_stacked;       // scopes on any thread's stack: 0 spares a call the key
PC_INTERNAL extern int gs_bound;         // streams bound to scopes, on every device
PC_INTERNAL extern volatile int gs_child; // this process is the child of a fork

PC_INTERNAL int64_t gs_top_of(gs_thread *t, int dev);
PC_INTERNAL int64_t gs_bound_to(int dev, uintptr_t stream);
PC_INTERNAL int gs_push(int dev, int64_t id);
PC_INTERNAL void gs_forget(int64_t id);
PC_INTERNAL int gs_bind(int dev, uintptr_t stream, int64_t id, int64_t over, int64_t *other);
PC_INTERNAL void gs_set_error(int kind, const char *msg, size_t n);
PC_INTERNAL size_t gs_last_error(char *buf, size_t len, int *kind);
PC_INTERNAL int gs_fork_failed(const char *call);
PC_INTERNAL int64_t gs_begin(const char *call, int device, const char *name, int flags);

// gs_top returns the calling thread's innermost scope on dev, or 0.
static inline int64_t gs_top(int dev) {
	if (__atomic_load_n(&gs_stacked, __ATOMIC_RELAXED) == 0) {
		return 0;
	}
	return gs_top_of(pthread_getspecific(gs_key), dev);
}

// gs_scope_of returns the scope a call from this thread for stream on dev
// allocates in: the thread's innermost on dev, else the one stream is
// bound to, else 0, the device's root. Both tests are a load where no
// thread has a scope and no stream is bound.
static inline int64_t gs_scope_of(int dev, uintptr_t stream) {
	int64_t id = gs_top(dev);
	if (id == 0 && __atomic_load_n(&gs_bound, __ATOMIC_RELAXED) != 0) {
		id = gs_bound_to(dev, stream);
	}
	return id;
}

// gs_forked reports whether this process is the child of a fork, where
// call fails (gs_fork_failed).
static inline int gs_forked(const char *call) { return gs_child ? gs_fork_failed(call) : 0; }

#endif
