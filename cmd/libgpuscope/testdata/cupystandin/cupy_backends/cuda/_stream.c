/*
 * A stand-in of the C side of cupy_backends.cuda.stream, a Cython module
 * of CuPy's, as stream.py builds and loads it: each thread's current
 * stream in a record, an object of the class _ThreadLocal with Cython's
 * layout (the object's head, the pointer to its C methods, a list of
 * handles, one a device, as CuPy 14's), kept in a threading.local as
 * "tls"; get_current_stream_ptr and set_current_stream_ptr, the C
 * functions over it (the current device's item), exported in __pyx_capi__
 * as capsules named by their signatures, as Cython exports them.
 * use(ptr) sets the calling thread's stream (as a CuPy stream's use()
 * does), devices(n) makes the records made after it have n devices, and
 * device(d) makes d the current device (cudaSetDevice; no check that d is
 * one), records() counts the records alive, fail_after(gets,
 * sets) makes a later call of get_ or set_current_stream_ptr raise, and
 * calls_on_one_thread(f, n) calls f n times from one thread it starts in
 * C, each call in a Python thread state of its own (PyGILState_Ensure's),
 * as a framework's worker thread calls into Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>

typedef struct {
	PyObject_HEAD
	void *methods;          /* Cython's __pyx_vtab */
	PyObject *current_stream; /* a list of handles (ints), one a device */
} Record;

static Py_ssize_t alive, n_devices = 1, current_device;

static PyObject *new_record(PyTypeObject *type, PyObject *args, PyObject *kw) {
	(void)args;
	(void)kw;
	Record *r = (Record *)type->tp_alloc(type, 0);
	if (r == NULL) {
		return NULL;
	}
	alive++;
	r->current_stream = PyList_New(n_devices);
	for (Py_ssize_t i = 0; r->current_stream != NULL && i < n_devices; i++) {
		PyList_SET_ITEM(r->current_stream, i, PyLong_FromLong(0));
	}
	if (r->current_stream == NULL) {
		Py_DECREF(r);
		return NULL;
	}
	return (PyObject *)r;
}

static int visit_record(PyObject *self, visitproc visit, void *arg) {
	Py_VISIT(((Record *)self)->current_stream);
	return 0;
}

static int clear_record(PyObject *self) {
	Py_CLEAR(((Record *)self)->current_stream);
	return 0;
}

static void drop_record(PyObject *self) {
	alive--;
	PyObject_GC_UnTrack(self);
	clear_record(self);
	Py_TYPE(self)->tp_free(self);
}

static PyTypeObject RecordType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "cupy_backends.cuda.stream._ThreadLocal",
	.tp_basicsize = sizeof(Record),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_new = new_record,
	.tp_dealloc = drop_record,
	.tp_traverse = visit_record,
	.tp_clear = clear_record,
};

static PyObject *local; /* threading.local() */
static PyObject *str_tls;

/* record returns the calling thread's record (a new reference), made where
 * it has none, as _ThreadLocal.get() does. */
static Record *record(void) {
	PyObject *r = PyObject_GetAttr(local, str_tls);
	if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) {
		return (Record *)r;
	}
	PyErr_Clear();
	r = PyObject_CallNoArgs((PyObject *)&RecordType);
	if (r != NULL && PyObject_SetAttr(local, str_tls, r) < 0) {
		Py_CLEAR(r);
	}
	return (Record *)r;
}

/* left counts, for get_current_stream_ptr ([0]) and set_current_stream_ptr
 * ([1]), the calls that succeed before one raises (fail_after), or is -1:
 * none raises. */
static long left[2] = {-1, -1};

/* fails says whether the call of the function i raises, and sets the
 * exception where it does. */
static int fails(int i) {
	if (left[i] == 0) {
		left[i] = -1;
		PyErr_SetString(PyExc_RuntimeError, "cudaErrorContextIsDestroyed (the stand-in's fail_after)");
		return 1;
	}
	if (left[i] > 0) {
		left[i]--;
	}
	return 0;
}

static intptr_t get_current_stream_ptr(void) {
	if (fails(0)) {
		return -1; /* as Cython 3 does, where the function's exception value is -1 */
	}
	Record *r = record();
	if (r == NULL) {
		PyErr_WriteUnraisable(NULL); /* as Cython does in a function of no except clause */
		return 0;
	}
	intptr_t s = 0;
	if (current_device < PyList_GET_SIZE(r->current_stream)) {
		s = (intptr_t)PyLong_AsVoidPtr(PyList_GET_ITEM(r->current_stream, current_device));
	}
	Py_DECREF(r);
	return s;
}

/* set_current_stream_ptr(ptr, device_id=-1): the optional arguments as
 * Cython passes them, NULL where none is given; the stand-in takes none. */
static PyObject *set_current_stream_ptr(intptr_t ptr, void *optional) {
	(void)optional;
	if (fails(1)) {
		return NULL;
	}
	Record *r = record();
	if (r == NULL) {
		return NULL;
	}
	PyObject *h = PyLong_FromVoidPtr((void *)ptr);
	int err = h == NULL ? -1 : PyList_SetItem(r->current_stream, current_device, h); /* steals h */
	Py_DECREF(r);
	if (err < 0) {
		return NULL;
	}
	Py_RETURN_NONE;
}

static PyObject *use(PyObject *self, PyObject *ptr) {
	(void)self;
	intptr_t p = (intptr_t)PyLong_AsVoidPtr(ptr);
	if (p == 0 && PyErr_Occurred()) {
		return NULL;
	}
	return set_current_stream_ptr(p, NULL);
}

static PyObject *devices(PyObject *self, PyObject *n) {
	(void)self;
	Py_ssize_t v = PyLong_AsSsize_t(n);
	if (v < 1) {
		return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "a device at least");
	}
	n_devices = v;
	Py_RETURN_NONE;
}

static PyObject *device(PyObject *self, PyObject *d) {
	(void)self;
	Py_ssize_t v = PyLong_AsSsize_t(d);
	if (v < 0) {
		return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "no device %zd", v);
	}
	current_device = v;
	Py_RETURN_NONE;
}

static PyObject *fail_after(PyObject *self, PyObject *args) {
	(void)self;
	if (!PyArg_ParseTuple(args, "ll:fail_after", &left[0], &left[1])) {
		return NULL;
	}
	Py_RETURN_NONE;
}

static PyObject *records(PyObject *self, PyObject *unused) {
	(void)self;
	(void)unused;
	return PyLong_FromSsize_t(alive);
}

struct calls {
	PyObject *f;
	int n, failed;
};

static void *make_calls(void *arg) {
	struct calls *c = arg;
	for (int i = 0; i < c->n; i++) {
		PyGILState_STATE g = PyGILState_Ensure(); /* a thread state made, and deleted at the release */
		PyObject *r = PyObject_CallNoArgs(c->f);
		if (r == NULL) {
			PyErr_Print();
			c->failed = 1;
		}
		Py_XDECREF(r);
		PyGILState_Release(g);
	}
	return NULL;
}

static PyObject *calls_on_one_thread(PyObject *self, PyObject *args) {
	(void)self;
	struct calls c = {NULL, 0, 0};
	pthread_t t;
	if (!PyArg_ParseTuple(args, "Oi:calls_on_one_thread", &c.f, &c.n)) {
		return NULL;
	}
	if (pthread_create(&t, NULL, make_calls, &c) != 0) {
		return PyErr_Format(PyExc_OSError, "pthread_create failed");
	}
	Py_BEGIN_ALLOW_THREADS
	pthread_join(t, NULL);
	Py_END_ALLOW_THREADS
	if (c.failed) {
		return PyErr_Format(PyExc_RuntimeError, "a call on the thread raised (printed above)");
	}
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"calls_on_one_thread", calls_on_one_thread, METH_VARARGS,
	 "calls_on_one_thread(f, n): f called n times on one C thread, each in a thread state of its own"},
	{"use", use, METH_O, "use(ptr): the calling thread's current stream is ptr"},
	{"records", records, METH_NOARGS, "records(): how many records are alive"},
	{"fail_after", fail_after, METH_VARARGS,
	 "fail_after(gets, sets): after so many more calls (-1: never), a call of get_ or set_current_stream_ptr raises, once"},
	{"devices", devices, METH_O, "devices(n): the records made after it have n devices"},
	{"device", device, METH_O, "device(d): d is the current device"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "_stream",
	.m_size = -1,
	.m_methods = methods,
};

/* export adds the C function f to capi under name, in a capsule named sig. */
static int export(PyObject *capi, const char *name, void *f, const char *sig) {
	PyObject *c = PyCapsule_New(f, sig, NULL);
	int err = c == NULL ? -1 : PyDict_SetItemString(capi, name, c);
	Py_XDECREF(c);
	return err;
}

PyMODINIT_FUNC PyInit__stream(void) {
	str_tls = PyUnicode_InternFromString("tls");
	PyObject *threading = PyImport_ImportModule("threading");
	if (str_tls == NULL || threading == NULL || PyType_Ready(&RecordType) < 0) {
		Py_XDECREF(threading);
		return NULL;
	}
	local = PyObject_CallMethod(threading, "local", NULL);
	Py_DECREF(threading);
	PyObject *mod = local == NULL ? NULL : PyModule_Create(&module);
	PyObject *capi = PyDict_New();
	if (mod == NULL || capi == NULL ||
	    export(capi, "get_current_stream_ptr", (void *)get_current_stream_ptr, "intptr_t (void)") < 0 ||
	    export(capi, "set_current_stream_ptr", (void *)set_current_stream_ptr, "PyObject *(intptr_t, struct __pyx_opt_args_13cupy_backends_4cuda_6stream_set_current_stream_ptr *__pyx_optional_args)") < 0 ||
	    PyModule_AddObject(mod, "__pyx_capi__", capi) < 0) {
		Py_XDECREF(capi);
		Py_XDECREF(mod);
		return NULL;
	}
	Py_INCREF(&RecordType);
	if (PyModule_AddObject(mod, "_ThreadLocal", (PyObject *)&RecordType) < 0) {
		Py_DECREF(&RecordType);
		Py_DECREF(mod);
		return NULL;
	}
	return mod;
}
