// Which scope a call allocates in, kept on the C side where the calling
// thread is known: each thread has a stack of the scopes it began and has
// not ended, per device, as PyTorch's use_mem_pool and CuPy's
// using_allocator are per thread; scopes of different threads are
// siblings. A thread with none allocates for a stream in the scope bound
// to it (gpuscope_scope_bind), so that a framework's helper thread, which
// began no scope (PyTorch's autograd thread), allocates in the scope of
// the stream it works on; else in the device's root scope (id 0). Go
// (package foreign) knows scopes by id only, and says when one has ended:
// the caller then forgets it (gs_forget) and asks again, which finds the
// enclosing one. The thread's last failure, for gpuscope_last_error, is
// kept here too, and so is whether this process is the child of a fork,
// which no entry point may serve.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scopes.h"

// What clib keeps for a thread (gs_thread): its scopes and its last
// failure. It is made on the thread's first scope or failure, and freed
// when the thread exits. (A __thread variable would do, but the Go runtime
// makes libgpuscope's TLS static, and glibc has little room for a library
// loaded later, as Python loads it.)
pthread_key_t gs_key;
int gs_stacked;
int gs_bound;
volatile int gs_child;

// self returns the calling thread's, making it where make says; NULL where
// it has none.
static gs_thread *self(int make) {
	gs_thread *t = pthread_getspecific(gs_key);
	if (t == NULL && make) {
		t = calloc(1, sizeof *t);
		if (t != NULL && pthread_setspecific(gs_key, t) != 0) {
			free(t);
			t = NULL;
		}
	}
	return t;
}

// The streams of a device bound to scopes. A scope begun inside the one a
// stream is bound to may bind it too, over it, until it ends: a stream's
// scope is the one of its entries that is deepest. Readers take no lock:
// a sequence count, odd while a writer changes the entries, tells them to
// read again.
typedef struct {
	pthread_mutex_t mu; // serializes writers
	uint64_t seq;
	int n; // entries in use
	struct {
		uintptr_t stream;
		int64_t id; // 0: a free entry
		int depth;  // 1, or one more than the entry of the stream it binds over
	} e[GS_BOUND];
	char pad[64];
} gs_device;

static gs_device bound[PC_DEVICES] = {[0 ... PC_DEVICES - 1] = {.mu = PTHREAD_MUTEX_INITIALIZER}};

// gs_top_of returns the innermost scope on dev of the thread whose t is, or
// 0.
int64_t gs_top_of(gs_thread *t, int dev) {
	for (int k = t == NULL ? -1 : t->n - 1; k >= 0; k--) {
		if (t->e[k].dev == dev) {
			return t->e[k].id;
		}
	}
	return 0;
}

// gs_bound_to returns the scope stream is bound to on dev, or 0.
int64_t gs_bound_to(int dev, uintptr_t stream) {
	if ((unsigned)dev >= PC_DEVICES) {
		return 0;
	}
	gs_device *b = &bound[dev];
	if (__atomic_load_n(&b->n, __ATOMIC_RELAXED) == 0) {
		return 0; // none of this device's
	}
	for (;;) {
		uint64_t seq = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE);
		if (seq & 1) {
			continue; // a writer is at work
		}
		int64_t id = 0;
		int depth = 0, left = __atomic_load_n(&b->n, __ATOMIC_RELAXED); // entries in use not yet seen
		for (int k = 0; k < GS_BOUND && left > 0; k++) {
			int64_t e = __atomic_load_n(&b->e[k].id, __ATOMIC_RELAXED);
			if (e == 0) {
				continue;
			}
			left--;
			int dk = __atomic_load_n(&b->e[k].depth, __ATOMIC_RELAXED);
			if (dk > depth && __atomic_load_n(&b->e[k].stream, __ATOMIC_RELAXED) == stream) {
				id = e;
				depth = dk;
			}
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&b->seq, __ATOMIC_RELAXED) == seq) {
			return id;
		}
	}
}

// gs_push makes id, just begun on dev, the calling thread's innermost
// scope there; -1 where the thread has GS_DEPTH open already.
int gs_push(int dev, int64_t id) {
	gs_thread *t = self(1);
	if (t == NULL || t->n == GS_DEPTH) {
		return -1;
	}
	t->e[t->n].dev = dev;
	t->e[t->n].id = id;
	t->n++;
	__atomic_add_fetch(&gs_stacked, 1, __ATOMIC_RELAXED);
	return 0;
}

// write changes a device's bound streams under its lock, as a writer of
// the sequence.
static void writeBegin(gs_device *b) {
	pthread_mutex_lock(&b->mu);
	__atomic_store_n(&b->seq, b->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void writeEnd(gs_device *b) {
	__atomic_store_n(&b->seq, b->seq + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&b->mu);
}

// gs_forget forgets the scope id, which has ended: the calling thread's
// stack drops it, and the streams bound to it are bound no more. (Another
// thread's stack drops it at that thread's next call that finds it ended.)
// No scope's id is under 1: 0 marks a free binding, which forgetting 0
// would count as one bound no more (gpuscope_scope_end(0), which fails).
void gs_forget(int64_t id) {
	if (id < 1) {
		return;
	}
	gs_thread *t = self(0);
	if (t != NULL) {
		int k = 0;
		for (int j = 0; j < t->n; j++) {
			if (t->e[j].id != id) {
				t->e[k++] = t->e[j];
			}
		}
		__atomic_sub_fetch(&gs_stacked, t->n - k, __ATOMIC_RELAXED);
		t->n = k;
	}
	for (int d = 0; d < PC_DEVICES; d++) {
		gs_device *b = &bound[d];
		if (__atomic_load_n(&b->n, __ATOMIC_RELAXED) == 0) {
			continue;
		}
		writeBegin(b);
		for (int j = 0; j < GS_BOUND; j++) {
			if (b->e[j].id == id) {
				__atomic_store_n(&b->e[j].id, 0, __ATOMIC_RELAXED);
				__atomic_store_n(&b->e[j].stream, 0, __ATOMIC_RELAXED);
				__atomic_store_n(&b->e[j].depth, 0, __ATOMIC_RELAXED);
				__atomic_store_n(&b->n, b->n - 1, __ATOMIC_RELAXED);
				__atomic_sub_fetch(&gs_bound, 1, __ATOMIC_RELAXED);
			}
		}
		writeEnd(b);
	}
}

// gs_bind binds stream on dev to the scope id: 0, or -1 where the device
// has GS_BOUND entries, or -2 where stream is bound to another scope,
// *other, which the caller asks Go about: if it has ended, it forgets it
// and binds again; if id is inside it, it binds over it (over: *other,
// where the call before returned -2 with it). Where over is not 0 and
// stream is bound to another scope than over now, it returns -2 with that
// one.
int gs_bind(int dev, uintptr_t stream, int64_t id, int64_t over, int64_t *other) {
	gs_device *b = &bound[dev];
	int slot = -1, top = -1;
	writeBegin(b);
	for (int j = 0; j < GS_BOUND; j++) {
		if (b->e[j].id == 0) {
			slot = slot < 0 ? j : slot;
		} else if (b->e[j].stream == stream && (top < 0 || b->e[j].depth > b->e[top].depth)) {
			top = j;
		}
	}
	int rc = -1;
	if (top >= 0 && b->e[top].id == id) {
		rc = 0; // bound to it already
	} else if (top >= 0 && b->e[top].id != over) {
		*other = b->e[top].id;
		rc = -2;
	} else if (slot >= 0) {
		__atomic_store_n(&b->e[slot].stream, stream, __ATOMIC_RELAXED);
		__atomic_store_n(&b->e[slot].depth, top < 0 ? 1 : b->e[top].depth + 1, __ATOMIC_RELAXED);
		__atomic_store_n(&b->e[slot].id, id, __ATOMIC_RELAXED);
		__atomic_store_n(&b->n, b->n + 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&gs_bound, 1, __ATOMIC_RELAXED);
		rc = 0;
	}
	writeEnd(b);
	return rc;
}

// gs_set_error keeps msg (n bytes, not NUL-terminated) as the calling
// thread's last failure, of kind (gpuscope.h's GPUSCOPE_OUT_OF_MEMORY,
// GPUSCOPE_FAILED).
void gs_set_error(int kind, const char *msg, size_t n) {
	gs_thread *t = self(1);
	if (t == NULL) {
		return; // no memory for it: the message is on standard error still
	}
	t->kind = kind;
	size_t k = n < sizeof t->msg - 1 ? n : sizeof t->msg - 1;
	memcpy(t->msg, msg, k);
	t->msg[k] = 0;
}

// gs_last_error writes the calling thread's last failure into buf, as
// snprintf does, returning its length (0: none), and its kind.
size_t gs_last_error(char *buf, size_t len, int *kind) {
	gs_thread *t = self(0);
	const char *msg = t == NULL ? "" : t->msg;
	if (kind != NULL) {
		*kind = t == NULL ? 0 : t->kind;
	}
	size_t n = strlen(msg);
	if (buf != NULL && len > 0) {
		size_t k = n < len - 1 ? n : len - 1;
		memcpy(buf, msg, k);
		buf[k] = 0;
	}
	return n;
}

// gs_child is set in the child of a fork. The child has one thread, the
// one that forked; the Go runtime's threads, and any lock they or other
// threads held at the fork, are not in it, so that a call into Go or a
// lock of this library's could wait forever. Every entry point asks
// gs_forked first, and fails.
static void inChild(void) { gs_child = 1; }

// dropThread frees what clib kept for a thread that exits; the scopes it
// left open stay open (Shutdown ends them), and no longer count in
// gs_stacked.
static void dropThread(void *p) {
	gs_thread *t = p;
	__atomic_sub_fetch(&gs_stacked, t->n, __ATOMIC_RELAXED);
	free(t);
}

// setUp makes the threads' key and registers the fork handler, as the
// library loads.
__attribute__((constructor)) static void setUp(void) {
	pthread_key_create(&gs_key, dropThread);
	pthread_atfork(NULL, NULL, inChild);
}

// told counts the child's messages, of which it writes the first ten: a
// child's garbage collector may free many of the parent's tensors.
static int told;

// gs_fork_failed fails call in the child of a fork: it writes why to
// standard error (with write, which takes no lock), keeps it as the
// thread's last failure, and returns 1. A free fails silently: the memory
// is the parent's, and a forked worker (a DataLoader's) that drops objects
// it inherited has done nothing wrong.
int gs_fork_failed(const char *call) {
	static const char why[] = ": gpuscope cannot serve the child of a fork (the Go runtime and the device "
				  "stay with the parent): call it from the parent, or exec a new program\n";
	char msg[512];
	size_t n = strlen(call);
	if (n > sizeof msg - sizeof why - 16) {
		n = sizeof msg - sizeof why - 16;
	}
	memcpy(msg, "gpuscope: ", 10);
	memcpy(msg + 10, call, n);
	memcpy(msg + 10 + n, why, sizeof why - 1);
	size_t total = 10 + n + sizeof why - 1;
	int freeing = strstr(call, "free") != NULL;
	if (!freeing && told < 10) {
		told++;
		ssize_t w = write(2, msg, total);
		(void)w;
	}
	gs_set_error(2, msg + 10, total - 11); // without the prefix and the newline
	return 1;
}
