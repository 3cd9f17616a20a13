/*
 * cupy_call is use_cupy's allocation function for CuPy (what
 * cupy.cuda.set_allocator takes), as a CPython type whose call runs in C:
 * gpuscope.use_cupy() compiles this file against the headers of the
 * Python it runs in (cc, once per source and Python, into the folder where
 * use_torch builds its shim) and makes one Malloc. Where it cannot, it
 * warns and runs the same steps in Python (gpuscope.py's _cupy_malloc),
 * which costs every CuPy allocation a Python call more.
 *
 * A call, Malloc(size), is every CuPy allocation:
 *   1. the calling thread's current CuPy stream: the handle CuPy's own
 *      pool reads (get_current_stream_ptr, a C function CuPy exports in
 *      its module's __pyx_capi__), or, where CuPy exports none, the ptr of
 *      cupy.cuda.get_current_stream(). CuPy's C function looks the
 *      thread's record up in a threading.local at every call and asks
 *      CUDA for the current device, which costs more than the rest of the
 *      call; where use_cupy found that record's layout (record_offset), a
 *      thread's first call keeps a reference to its record and later calls
 *      read the handle from it where the process has one device (see mine
 *      and stream_in; with several, CuPy's function reads the device's);
 *   2. the allocation function of that stream: for a default stream (its
 *      handle 0, 1 or 2) CFunctionAllocator.malloc over gpuscope's
 *      gpuscope_cupy_malloc; for another, the one the dict streams holds
 *      for it (over gpuscope_cupy_stream_malloc), which miss() makes and
 *      keeps the first time;
 *   3. that function's MemoryPointer, or, where gpuscope refused the
 *      allocation (CFunctionAllocator makes an array at address 0 of the
 *      NULL gpuscope returns past the cap), what oom(size) raises: CuPy's
 *      OutOfMemoryError with gpuscope's message.
 * The CFunctionAllocators call gpuscope's functions through this module's
 * (wrap), which count, for the calling thread, the NULLs gpuscope returns
 * for a size that is not 0: step 3 reads the MemoryPointer's ptr (an
 * attribute read and an int made, as much as the rest of the call) only
 * where the count moved during the call, by this allocation or one that
 * ran inside it (a finalizer's).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if PY_VERSION_HEX < 0x03090000
#error "gpuscope's CuPy allocation function needs Python 3.9 or later (vectorcall)"
#endif
#ifndef Py_TPFLAGS_HAVE_VECTORCALL
#define Py_TPFLAGS_HAVE_VECTORCALL _Py_TPFLAGS_HAVE_VECTORCALL
#endif

/* The signature of CuPy's get_current_stream_ptr in its capsule's name, as
 * Cython writes it (intptr_t get_current_stream_ptr()): a capsule of
 * another is not called. */
static const char stream_ptr_sig[] = "intptr_t (void)";

/* The signature of CuPy's set_current_stream_ptr(intptr_t ptr, int
 * device_id=-1), which record_offset calls to check where a record keeps
 * the handle, as Cython names it: the struct of its optional arguments
 * (NULL: none given) is named after the module and the function. */
static const char set_stream_head[] = "PyObject *(intptr_t, struct __pyx_opt_args_",
		  set_stream_tail[] = "_set_current_stream_ptr *__pyx_optional_args)";

/* cudaStreamPerThread: handles up to it are a default stream's. */
enum { per_thread = 2 };

typedef intptr_t (*stream_ptr_fn)(void);
typedef PyObject *(*set_stream_fn)(intptr_t, void *);

/* gpuscope_cupy_malloc and gpuscope_cupy_stream_malloc, as wrap was given
 * them. */
typedef intptr_t (*cupy_malloc_fn)(intptr_t param, size_t size, int device);
static cupy_malloc_fn gs_malloc, gs_stream_malloc;

/* refusals counts the calling thread's allocations through the functions
 * below that returned NULL for a size that is not 0. */
static __thread unsigned long refusals;

static intptr_t default_malloc(intptr_t param, size_t size, int device) {
	intptr_t p = gs_malloc(param, size, device);
	if (p == 0 && size != 0) {
		refusals++;
	}
	return p;
}

static intptr_t stream_malloc(intptr_t param, size_t size, int device) {
	intptr_t p = gs_stream_malloc(param, size, device);
	if (p == 0 && size != 0) {
		refusals++;
	}
	return p;
}

typedef struct {
	PyObject_HEAD
	vectorcallfunc vectorcall;
	stream_ptr_fn stream_ptr; /* CuPy's, or NULL: current_stream is called */
	PyObject *local;          /* CuPy's threading.local of records (as "tls"), or NULL: none is read */
	PyTypeObject *kind;       /* a record's type */
	Py_ssize_t offset;        /* of a record's list of handles, one a device */
	uint64_t serial;          /* this Malloc's number, which mine names */
	PyObject *malloc;         /* a default stream's allocation function */
	PyObject *streams;        /* dict: a stream's handle -> its allocation function */
	PyObject *miss;           /* miss(): the current stream's, made and kept in streams */
	PyObject *current_stream; /* cupy.cuda.get_current_stream */
	PyObject *capsule;        /* holds stream_ptr's module's capsule */
	PyObject *oom;            /* oom(size) raises CuPy's OutOfMemoryError */
} Malloc;

static PyObject *str_ptr; /* "ptr", interned */
static PyObject *str_tls; /* "tls", interned */

/* mine is the calling thread's record as a Malloc last read it: CuPy's
 * record of the thread's current stream (a strong reference), read in the
 * Python thread state numbered thread by the Malloc numbered serial. A
 * thread state that ends takes its record out of CuPy's threading.local;
 * a later one on the same OS thread has another number, so its first
 * call reads its own record. When the OS thread exits, the reference
 * passes to ended (thread_exits), and the next record read drops it. */
static __thread struct {
	uint64_t thread, serial;
	PyObject *record;
} mine;

static uint64_t serials;       /* Mallocs made, under the GIL: the last one's serial */
static pthread_key_t exits;    /* its value, a thread's mine.record, is passed to thread_exits */
static int exits_made;         /* whether exits was made (the module's init) */

/* ended holds the records of threads that exited, for drop_ended. It is a
 * stack that thread_exits pushes onto and drop_ended takes whole, with
 * atomic instructions (a lock held at a fork would stay held in the child). */
struct ended {
	struct ended *next;
	PyObject *record;
};
static struct ended *ended;

static void thread_exits(void *record) {
	struct ended *e = malloc(sizeof *e);
	if (e == NULL) {
		return; /* the record stays referenced: a small object kept */
	}
	e->record = record;
	e->next = __atomic_load_n(&ended, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&ended, &e->next, e, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
	}
}

/* drop_ended drops the references of thread_exits' records; the caller
 * holds the GIL. */
static void drop_ended(void) {
	struct ended *e = __atomic_exchange_n(&ended, NULL, __ATOMIC_ACQUIRE);
	while (e != NULL) {
		struct ended *next = e->next;
		Py_DECREF(e->record);
		free(e);
		e = next;
	}
}

/* list_of returns the list the record r keeps at offset (borrowed), or
 * NULL where it is no list. */
static PyObject *list_of(PyObject *r, Py_ssize_t offset) {
	PyObject *l;
	memcpy(&l, (char *)r + offset, sizeof l);
	return l != NULL && PyList_CheckExact(l) ? l : NULL;
}

/* stream_in sets *h to the handle the record r keeps, where its list has
 * one handle (the process has one device: CuPy indexes the list by the
 * current device), and returns 1; 0 otherwise. */
static int stream_in(PyObject *r, Py_ssize_t offset, intptr_t *h) {
	PyObject *l = list_of(r, offset);
	if (l == NULL || PyList_GET_SIZE(l) != 1 || !PyLong_CheckExact(PyList_GET_ITEM(l, 0))) {
		return 0;
	}
	*h = (intptr_t)PyLong_AsVoidPtr(PyList_GET_ITEM(l, 0));
	if (*h == 0 && PyErr_Occurred()) {
		PyErr_Clear();
		return 0;
	}
	return 1;
}

/* remember returns the calling thread's current stream from CuPy's C
 * function, which makes the thread's record where it has none, and keeps
 * that record in mine for later calls, where it holds the same handle or
 * several (CuPy's function returns cudaStreamPerThread for a handle of 0
 * where CUPY_CUDA_PER_THREAD_DEFAULT_STREAM is set: both are a default
 * stream's); -1 with an exception set where CuPy's function raised. */
static intptr_t remember(Malloc *m, uint64_t thread) {
	intptr_t s = m->stream_ptr();
	if (s == -1 && PyErr_Occurred()) {
		return s; /* CuPy raised (Cython 3's exception value): no other call now, its error passes up */
	}
	drop_ended();
	PyObject *r = PyObject_GetAttr(m->local, str_tls);
	if (r == NULL) {
		PyErr_Clear();
		return s;
	}
	intptr_t h = s;
	if (Py_TYPE(r) != m->kind || list_of(r, m->offset) == NULL ||
	    (stream_in(r, m->offset, &h) && h != s && !(h == 0 && s == per_thread))) {
		Py_DECREF(r);
		return s;
	}
	if (pthread_setspecific(exits, r) != 0) {
		Py_DECREF(r);
		return s;
	}
	PyObject *old = mine.record;
	mine.record = r;
	mine.thread = thread;
	mine.serial = m->serial;
	Py_XDECREF(old);
	return s;
}

/* current returns the calling thread's current CuPy stream's handle; -1
 * with an exception set where CuPy raised one. */
static intptr_t current(Malloc *m) {
	if (m->local != NULL) {
		uint64_t thread = PyThreadState_GetID(PyThreadState_Get());
		if (mine.record == NULL || mine.thread != thread || mine.serial != m->serial) {
			return remember(m, thread);
		}
		intptr_t s;
		return stream_in(mine.record, m->offset, &s) ? s : m->stream_ptr();
	}
	if (m->stream_ptr != NULL) {
		return m->stream_ptr();
	}
	PyObject *stream = PyObject_CallNoArgs(m->current_stream);
	if (stream == NULL) {
		return -1;
	}
	PyObject *ptr = PyObject_GetAttr(stream, str_ptr);
	Py_DECREF(stream);
	if (ptr == NULL) {
		return -1;
	}
	intptr_t s = (intptr_t)PyLong_AsVoidPtr(ptr);
	Py_DECREF(ptr);
	return s;
}

/* function returns the allocation function of the stream s (a new
 * reference), or NULL with an exception set. */
static PyObject *function(Malloc *m, intptr_t s) {
	if (s <= per_thread) {
		Py_INCREF(m->malloc);
		return m->malloc;
	}
	PyObject *key = PyLong_FromVoidPtr((void *)s);
	if (key == NULL) {
		return NULL;
	}
	PyObject *f = PyDict_GetItemWithError(m->streams, key); /* borrowed */
	Py_DECREF(key);
	if (f != NULL) {
		Py_INCREF(f);
		return f;
	}
	return PyErr_Occurred() ? NULL : PyObject_CallNoArgs(m->miss);
}

static PyObject *call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
	Malloc *m = (Malloc *)self;
	if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
		PyErr_SetString(PyExc_TypeError, "gpuscope's CuPy allocation function takes one argument, the size");
		return NULL;
	}
	intptr_t s = current(m);
	if (s == -1 && PyErr_Occurred()) {
		return NULL;
	}
	PyObject *f = function(m, s);
	if (f == NULL) {
		return NULL;
	}
	unsigned long before = refusals;
	PyObject *mem = PyObject_Vectorcall(f, args, 1, NULL);
	Py_DECREF(f);
	if (mem == NULL || refusals == before) {
		return mem;
	}
	PyObject *ptr = PyObject_GetAttr(mem, str_ptr);
	int null = ptr == NULL ? -1 : PyObject_Not(ptr);
	Py_XDECREF(ptr);
	if (null > 0) {
		null = PyObject_IsTrue(args[0]); /* CuPy's array of no bytes is at 0 */
	}
	if (null == 0) {
		return mem; /* the NULL counted was another allocation's, inside this one */
	}
	Py_DECREF(mem);
	if (null < 0) {
		return NULL;
	}
	PyObject *r = PyObject_CallOneArg(m->oom, args[0]);
	if (r != NULL) {
		Py_DECREF(r);
		PyErr_SetString(PyExc_SystemError, "gpuscope: the out-of-memory function returned");
	}
	return NULL;
}

/* function_of returns the C function in capsule where its name begins
 * with head and ends with tail (sig: head alone, tail ""); NULL with an
 * exception set otherwise. */
static void *function_of(PyObject *capsule, const char *head, const char *tail) {
	const char *name = PyCapsule_CheckExact(capsule) ? PyCapsule_GetName(capsule) : NULL;
	size_t n = name == NULL ? 0 : strlen(name), h = strlen(head), t = strlen(tail);
	int match = name != NULL && (t == 0 ? strcmp(name, head) == 0
					    : n >= h + t && strncmp(name, head, h) == 0 && strcmp(name + n - t, tail) == 0);
	if (!match) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError, "gpuscope: not a capsule of a C function %s...%s", head, tail);
		return NULL;
	}
	return PyCapsule_GetPointer(capsule, name);
}

/* stream_ptr_of returns the C function in capsule, CuPy's
 * get_current_stream_ptr, where its signature is the one called; NULL
 * with an exception set otherwise (None, or another signature). */
static stream_ptr_fn stream_ptr_of(PyObject *capsule) {
	void *p = function_of(capsule, stream_ptr_sig, "");
	stream_ptr_fn f = NULL;
	if (p != NULL) {
		memcpy(&f, &p, sizeof f); /* a data pointer to a function's, as Cython's import does */
	}
	return f;
}

/* set_record takes record, None or (local, kind, offset) as
 * record_offset checked them: CuPy's threading.local of its records, their
 * type and the offset of their handle. */
static int set_record(Malloc *m, PyObject *record) {
	if (record == Py_None) {
		return 0;
	}
	PyObject *local, *kind;
	Py_ssize_t offset;
	if (!PyArg_ParseTuple(record, "OO!n:record", &local, &PyType_Type, &kind, &offset)) {
		return -1;
	}
	if (m->stream_ptr == NULL || offset < (Py_ssize_t)sizeof(PyObject) ||
	    offset > ((PyTypeObject *)kind)->tp_basicsize - (Py_ssize_t)sizeof(PyObject *)) {
		PyErr_SetString(PyExc_ValueError, "gpuscope: a record read needs CuPy's C function and an offset inside the record");
		return -1;
	}
	Py_INCREF(local);
	Py_INCREF(kind);
	m->local = local;
	m->kind = (PyTypeObject *)kind;
	m->offset = offset;
	return 0;
}

static PyObject *make(PyTypeObject *type, PyObject *args, PyObject *kw) {
	PyObject *malloc, *streams, *miss, *current_stream, *capsule, *oom, *record = Py_None;
	static char *names[] = {"malloc", "streams", "miss", "current_stream", "capsule", "oom", "record", NULL};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!OOOO|O:Malloc", names, &malloc, &PyDict_Type, &streams, &miss,
					 &current_stream, &capsule, &oom, &record)) {
		return NULL;
	}
	Malloc *m = (Malloc *)type->tp_alloc(type, 0);
	if (m == NULL) {
		return NULL;
	}
	m->vectorcall = call;
	m->stream_ptr = stream_ptr_of(capsule);
	PyErr_Clear(); /* none, or another signature: current_stream is called */
	m->serial = ++serials;
	PyObject **fields[] = {&m->malloc, &m->streams, &m->miss, &m->current_stream, &m->capsule, &m->oom};
	PyObject *values[] = {malloc, streams, miss, current_stream, capsule, oom};
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
		Py_INCREF(values[i]);
		*fields[i] = values[i];
	}
	if (set_record(m, record) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return (PyObject *)m;
}

static int traverse(PyObject *self, visitproc visit, void *arg) {
	Malloc *m = (Malloc *)self;
	Py_VISIT(m->malloc);
	Py_VISIT(m->streams);
	Py_VISIT(m->miss);
	Py_VISIT(m->current_stream);
	Py_VISIT(m->capsule);
	Py_VISIT(m->oom);
	Py_VISIT(m->local);
	Py_VISIT(m->kind);
	return 0;
}

static int clear(PyObject *self) {
	Malloc *m = (Malloc *)self;
	m->stream_ptr = NULL;
	Py_CLEAR(m->malloc);
	Py_CLEAR(m->streams);
	Py_CLEAR(m->miss);
	Py_CLEAR(m->current_stream);
	Py_CLEAR(m->capsule);
	Py_CLEAR(m->oom);
	Py_CLEAR(m->local);
	Py_CLEAR(m->kind);
	return 0;
}

static void dealloc(PyObject *self) {
	PyObject_GC_UnTrack(self);
	clear(self);
	Py_TYPE(self)->tp_free(self);
}

/* c_stream says which stream lookup a call makes: True, CuPy's C function;
 * False, cupy.cuda.get_current_stream. */
static PyObject *c_stream(PyObject *self, void *closure) {
	(void)closure;
	return PyBool_FromLong(((Malloc *)self)->stream_ptr != NULL);
}

/* record says whether a call reads the stream from the thread's record
 * (mine) after the thread's first. */
static PyObject *record(PyObject *self, void *closure) {
	(void)closure;
	return PyBool_FromLong(((Malloc *)self)->local != NULL);
}

/* stream_of(get) calls CuPy's get_current_stream_ptr in the capsule get:
 * the calling thread's current stream, its record made where it had none. */
static PyObject *stream_of(PyObject *self, PyObject *capsule) {
	(void)self;
	stream_ptr_fn get = stream_ptr_of(capsule);
	if (get == NULL) {
		return NULL;
	}
	intptr_t s = get();
	if (s == -1 && PyErr_Occurred()) {
		return NULL;
	}
	return PyLong_FromVoidPtr((void *)s);
}

/* put_back sets the calling thread's stream to h again after set or get
 * raised during record_offset's probe, where the thread may be left on a probe
 * handle (every later kernel on it would fail), and returns NULL with
 * their exception. Where set raises once more, the thread keeps what it
 * has, and the exception is the first. */
static PyObject *put_back(set_stream_fn set, intptr_t h) {
	PyObject *type, *value, *tb;
	PyErr_Fetch(&type, &value, &tb);
	PyObject *done = set(h, NULL);
	if (done == NULL) {
		PyErr_Clear();
	}
	Py_XDECREF(done);
	PyErr_Restore(type, value, tb);
	return NULL;
}

/* sought is what seek looks for among the objects a tp_traverse visits. */
struct sought {
	PyObject *object;
	int found;
};

static int seek(PyObject *o, void *arg) {
	struct sought *s = arg;
	s->found |= o == s->object;
	return 0;
}

/* holds says whether what the object r keeps at offset is an object r
 * refers to, one its type's tp_traverse visits: a field of the record's
 * size and flags may be no object (a count, a C pointer), which list_of
 * would read through. The value is compared, never read through. */
static int holds(PyObject *r, Py_ssize_t offset) {
	struct sought s = {NULL, 0};
	memcpy(&s.object, (char *)r + offset, sizeof s.object);
	if (s.object == NULL || Py_TYPE(r)->tp_traverse == NULL) {
		return 0;
	}
	Py_TYPE(r)->tp_traverse(r, seek, &s);
	return s.found;
}

/* the_one returns the index of the one item of the list l that is the
 * handle h, or -1 where none or several are. */
static Py_ssize_t the_one(PyObject *l, intptr_t h) {
	Py_ssize_t at = -1;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(l); i++) {
		PyObject *x = PyList_GET_ITEM(l, i);
		if (PyLong_CheckExact(x) && (intptr_t)PyLong_AsVoidPtr(x) == h) {
			if (at >= 0) {
				return -1;
			}
			at = i;
		}
	}
	PyErr_Clear();
	return at;
}

/* record_offset(record, get, set) returns where a record of the type of
 * record (the calling thread's, from CuPy's threading.local) keeps its
 * list of stream handles, one a device: the last field of the object
 * (Cython's layout of a class whose one field is an object: the head,
 * the pointer to its C methods, the field), or -1 where it does not. The
 * type must hold objects (the garbage collector's flag) and be of that
 * size, the field an object the record refers to (holds) and a list, and
 * set (CuPy's set_current_stream_ptr, on the current device) is called
 * with two other handles, each of which must then be in one item of that
 * list, the same item, and what get returns;
 * then the item gets its handle back (where it did not hold them, set
 * gets what get returned before). Nothing else may run on the thread
 * between (the caller turns the garbage collector off): an allocation
 * would see those handles as the current stream. */
static PyObject *record_offset(PyObject *self, PyObject *args) {
	(void)self;
	PyObject *r, *gc, *sc;
	if (!PyArg_ParseTuple(args, "OOO:record_offset", &r, &gc, &sc)) {
		return NULL;
	}
	stream_ptr_fn get = stream_ptr_of(gc);
	void *sp = get == NULL ? NULL : function_of(sc, set_stream_head, set_stream_tail);
	if (sp == NULL) {
		return NULL;
	}
	set_stream_fn set;
	memcpy(&set, &sp, sizeof set);
	PyTypeObject *t = Py_TYPE(r);
	Py_ssize_t offset = (Py_ssize_t)(sizeof(PyObject) + sizeof(void *));
	if (!PyType_HasFeature(t, Py_TPFLAGS_HAVE_GC) || t->tp_itemsize != 0 ||
	    t->tp_basicsize != offset + (Py_ssize_t)sizeof(PyObject *) || !holds(r, offset) || list_of(r, offset) == NULL) {
		return PyLong_FromLong(-1);
	}
	PyObject *l = list_of(r, offset), *was = PyList_GetSlice(l, 0, PyList_GET_SIZE(l));
	if (was == NULL) {
		return NULL;
	}
	intptr_t before = get(), probes[] = {before ^ 0x5a5a5a0, 0x7e57ab10};
	if (before == -1 && PyErr_Occurred()) {
		Py_DECREF(was);
		return NULL; /* CuPy's get raised (Cython 3's exception value), before any set */
	}
	Py_ssize_t at = -2;
	for (size_t i = 0; i < sizeof probes / sizeof probes[0] && at != -1; i++) {
		PyObject *done = set(probes[i], NULL);
		if (done == NULL) {
			Py_DECREF(was);
			return put_back(set, before);
		}
		Py_DECREF(done);
		intptr_t now = get();
		if (now == -1 && PyErr_Occurred()) {
			Py_DECREF(was);
			return put_back(set, before);
		}
		Py_ssize_t one = list_of(r, offset) == l && now == probes[i] ? the_one(l, probes[i]) : -1;
		at = at == -2 || at == one ? one : -1;
	}
	intptr_t back = at >= 0 ? (intptr_t)PyLong_AsVoidPtr(PyList_GET_ITEM(was, at)) : before;
	Py_DECREF(was);
	PyErr_Clear();
	PyObject *done = set(back, NULL);
	if (done == NULL) {
		return put_back(set, before);
	}
	Py_DECREF(done);
	return PyLong_FromSsize_t(at >= 0 ? offset : -1);
}

/* wrap(malloc, stream_malloc) takes the addresses of gpuscope_cupy_malloc
 * and gpuscope_cupy_stream_malloc and returns those of this module's
 * functions over them, for the CFunctionAllocators that Malloc calls. */
static PyObject *wrap(PyObject *self, PyObject *args) {
	(void)self;
	PyObject *a, *b;
	if (!PyArg_ParseTuple(args, "OO:wrap", &a, &b)) {
		return NULL;
	}
	void *pa = PyLong_AsVoidPtr(a), *pb = pa == NULL ? NULL : PyLong_AsVoidPtr(b);
	if (pa == NULL || pb == NULL) {
		if (!PyErr_Occurred()) {
			PyErr_SetString(PyExc_ValueError, "gpuscope: wrap takes two functions' addresses, not 0");
		}
		return NULL;
	}
	memcpy(&gs_malloc, &pa, sizeof gs_malloc);
	memcpy(&gs_stream_malloc, &pb, sizeof gs_stream_malloc);
	cupy_malloc_fn fa = default_malloc, fb = stream_malloc;
	void *wa, *wb;
	memcpy(&wa, &fa, sizeof wa);
	memcpy(&wb, &fb, sizeof wb);
	return Py_BuildValue("(NN)", PyLong_FromVoidPtr(wa), PyLong_FromVoidPtr(wb));
}

static PyMethodDef methods[] = {
	{"wrap", wrap, METH_VARARGS, "wrap(malloc, stream_malloc): this module's functions over gpuscope's, by address"},
	{"stream_of", stream_of, METH_O, "stream_of(get): the calling thread's stream from CuPy's get_current_stream_ptr"},
	{"record_offset", record_offset, METH_VARARGS,
	 "record_offset(record, get, set): where CuPy's record of a thread keeps its stream, or -1"},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef getset[] = {
	{"c_stream", c_stream, NULL, "whether a call reads the stream through CuPy's C function", NULL},
	{"record", record, NULL, "whether a call reads the stream from the thread's record", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject MallocType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "_gpuscope_cupy.Malloc",
	.tp_doc = "gpuscope's CuPy allocation function: Malloc(malloc, streams, miss, current_stream, capsule, oom)(size)",
	.tp_basicsize = sizeof(Malloc),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
	.tp_new = make,
	.tp_dealloc = dealloc,
	.tp_traverse = traverse,
	.tp_clear = clear,
	.tp_call = PyVectorcall_Call,
	.tp_vectorcall_offset = offsetof(Malloc, vectorcall),
	.tp_getset = getset,
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "_gpuscope_cupy",
	.m_doc = "gpuscope's CuPy allocation function, in C (cupy_call.c)",
	.m_size = -1,
	.m_methods = methods,
};

PyMODINIT_FUNC PyInit__gpuscope_cupy(void) {
	str_ptr = PyUnicode_InternFromString("ptr");
	str_tls = PyUnicode_InternFromString("tls");
	if (str_ptr == NULL || str_tls == NULL || PyType_Ready(&MallocType) < 0) {
		return NULL;
	}
	if (!exits_made) {
		if (pthread_key_create(&exits, thread_exits) != 0) {
			PyErr_SetString(PyExc_OSError, "gpuscope: pthread_key_create failed");
			return NULL;
		}
		exits_made = 1;
	}
	PyObject *mod = PyModule_Create(&module);
	if (mod == NULL) {
		return NULL;
	}
	Py_INCREF(&MallocType);
	if (PyModule_AddObject(mod, "Malloc", (PyObject *)&MallocType) < 0) {
		Py_DECREF(&MallocType);
		Py_DECREF(mod);
		return NULL;
	}
	return mod;
}
