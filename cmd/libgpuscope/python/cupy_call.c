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
 *      cupy.cuda.get_current_stream();
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
#include <stddef.h>
#include <stdint.h>
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

/* cudaStreamPerThread: handles up to it are a default stream's. */
enum { per_thread = 2 };

typedef intptr_t (*stream_ptr_fn)(void);

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
	PyObject *malloc;         /* a default stream's allocation function */
	PyObject *streams;        /* dict: a stream's handle -> its allocation function */
	PyObject *miss;           /* miss(): the current stream's, made and kept in streams */
	PyObject *current_stream; /* cupy.cuda.get_current_stream */
	PyObject *capsule;        /* holds stream_ptr's module's capsule */
	PyObject *oom;            /* oom(size) raises CuPy's OutOfMemoryError */
} Malloc;

static PyObject *str_ptr; /* "ptr", interned */

/* current returns the calling thread's current CuPy stream's handle; -1
 * with an exception set where CuPy raised one. */
static intptr_t current(Malloc *m) {
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

/* stream_ptr_of returns the C function in capsule, CuPy's
 * get_current_stream_ptr, where its signature is the one called; NULL
 * otherwise (None, or another signature): current_stream is called. */
static stream_ptr_fn stream_ptr_of(PyObject *capsule) {
	if (!PyCapsule_CheckExact(capsule)) {
		return NULL;
	}
	const char *name = PyCapsule_GetName(capsule);
	if (name == NULL || strcmp(name, stream_ptr_sig) != 0) {
		PyErr_Clear();
		return NULL;
	}
	void *p = PyCapsule_GetPointer(capsule, name);
	if (p == NULL) {
		PyErr_Clear();
		return NULL;
	}
	stream_ptr_fn f;
	memcpy(&f, &p, sizeof f); /* a data pointer to a function's, as Cython's import does */
	return f;
}

static PyObject *make(PyTypeObject *type, PyObject *args, PyObject *kw) {
	PyObject *malloc, *streams, *miss, *current_stream, *capsule, *oom;
	static char *names[] = {"malloc", "streams", "miss", "current_stream", "capsule", "oom", NULL};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!OOOO:Malloc", names, &malloc, &PyDict_Type, &streams, &miss,
					 &current_stream, &capsule, &oom)) {
		return NULL;
	}
	Malloc *m = (Malloc *)type->tp_alloc(type, 0);
	if (m == NULL) {
		return NULL;
	}
	m->vectorcall = call;
	m->stream_ptr = stream_ptr_of(capsule);
	PyObject **fields[] = {&m->malloc, &m->streams, &m->miss, &m->current_stream, &m->capsule, &m->oom};
	PyObject *values[] = {malloc, streams, miss, current_stream, capsule, oom};
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
		Py_INCREF(values[i]);
		*fields[i] = values[i];
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
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef getset[] = {
	{"c_stream", c_stream, NULL, "whether a call reads the stream through CuPy's C function", NULL},
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
	if (str_ptr == NULL || PyType_Ready(&MallocType) < 0) {
		return NULL;
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
