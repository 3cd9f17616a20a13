"""Times what use_cupy's allocation function costs a CuPy allocation beyond
CFunctionAllocator.malloc itself (issue 47), with no GPU and no CuPy: C
stand-ins play CuPy's parts that the function calls (a malloc returning
an object with ptr, cupy.cuda.get_current_stream returning a stream
object, compiled here with cc against this Python's headers, and
cupy_backends.cuda.stream: testdata/cupystandin's, whose C functions keep
each thread's stream in a record in a threading.local and are exported in
__pyx_capi__, as CuPy's Cython does), so that only the function's own
work differs between the rows.

    PYTHONPATH=cmd/libgpuscope/python python3 scripts/measure/cupy_call_bench.py [CALLS]

It prints, for each way the function can run, nanoseconds a call (the
fastest of 15 timings of CALLS calls, default 1,000,000, the rows taking
turns) and what
it adds to the stand-in malloc's own call: "python" (gpuscope.py's
_cupy_malloc without its compiled form: what runs where no compiler is,
and what ran before it), "c, get_current_stream" and "c, capsule" (the
compiled form, reading the stream the slow way and through CuPy's C
function) and "c, record" (the compiled form reading the stream from the
thread's record, as it does where use_cupy found the record's layout).
CuPy's real calls cost more than the stand-ins; the differences between
the rows are the function's own.
"""
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import timeit

import gpuscope

STANDIN = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

typedef struct { PyObject_HEAD Py_ssize_t ptr; } Mem;
static PyMemberDef members[] = {{"ptr", T_PYSSIZET, offsetof(Mem, ptr), READONLY, NULL}, {NULL}};
static PyTypeObject MemType = {PyVarObject_HEAD_INIT(NULL, 0) .tp_name = "standin.Mem",
    .tp_basicsize = sizeof(Mem), .tp_flags = Py_TPFLAGS_DEFAULT, .tp_members = members};

static PyObject *stream;  /* the current stream object */

static PyObject *malloc_(PyObject *self, PyObject *size) {
    Mem *m = PyObject_New(Mem, &MemType);
    if (m != NULL) m->ptr = PyObject_IsTrue(size) ? 0x7f0000001000 : 0;
    return (PyObject *)m;
}
static PyObject *get_current_stream(PyObject *self, PyObject *unused) { Py_INCREF(stream); return stream; }
static PyObject *use(PyObject *self, PyObject *s) {
    Py_INCREF(s); Py_XDECREF(stream); stream = s;
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {
    {"malloc", malloc_, METH_O, NULL},
    {"get_current_stream", get_current_stream, METH_NOARGS, NULL},
    {"use", use, METH_O, NULL},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "standin", NULL, -1, methods};
PyMODINIT_FUNC PyInit_standin(void) {
    if (PyType_Ready(&MemType) < 0) return NULL;
    return PyModule_Create(&mod);
}
"""


class Stream:
    """cupy.cuda.Stream: a Python object whose ptr is its handle."""

    def __init__(self, ptr):
        self.ptr = ptr


def standin(folder):
    src, so = os.path.join(folder, "standin.c"), os.path.join(folder, "standin" + sysconfig.get_config_var("EXT_SUFFIX"))
    with open(src, "w") as f:
        f.write(STANDIN)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-I" + sysconfig.get_paths()["include"], src, "-o", so], check=True)
    spec = importlib.util.spec_from_file_location("standin", so, loader=importlib.machinery.ExtensionFileLoader("standin", so))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def cupy_backends_stream():
    """testdata/cupystandin's cupy_backends.cuda.stream, as
    sys.modules["cupy_backends.cuda.stream"], where use_cupy looks."""
    import types

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "testdata",
                        "cupystandin", "cupy_backends", "cuda", "stream.py")
    spec = importlib.util.spec_from_file_location("cupy_backends.cuda.stream", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    sys.modules.update({"cupy_backends": types.ModuleType("cupy_backends"),
                        "cupy_backends.cuda": types.ModuleType("cupy_backends.cuda"), "cupy_backends.cuda.stream": m})
    return m


def fastest(rows, calls, rounds=15):
    """The fastest of rounds timings of calls calls of each row's function,
    in nanoseconds a call; the rows take turns, so that the machine's
    drift falls on each alike."""
    best = [float("inf")] * len(rows)
    for _ in range(rounds):
        for i, (_, f) in enumerate(rows):
            best[i] = min(best[i], timeit.timeit(lambda: f(256), number=calls) / calls * 1e9)
    return best


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as d:
        s = standin(d)
    s.use(Stream(0))

    def on_stream(stream):
        return s.malloc

    def made(**kw):
        return gpuscope._cupy_malloc(s.malloc, on_stream, s.get_current_stream, MemoryError, **kw)

    rows = [("python", made())]
    ext = getattr(gpuscope, "_cupy_ext", None)
    if ext is not None:
        mod, why = ext()
        if mod is None:
            sys.exit(f"cupy_call_bench: the compiled form could not be built: {why}")
        capsule = cupy_backends_stream().__pyx_capi__["get_current_stream_ptr"]
        record = gpuscope._cupy_stream_record(mod, capsule)
        if record is None:
            sys.exit("cupy_call_bench: use_cupy found no record in the stand-in")
        rows += [("c, get_current_stream", made(ext=mod)), ("c, capsule", made(ext=mod, capsule=capsule)),
                 ("c, record", made(ext=mod, capsule=capsule, record=record))]
    times = fastest([("stand-in malloc alone", s.malloc)] + rows, calls)
    print(f"Python {sys.version.split()[0]}, {calls} calls a timing, the fastest of 15 taking turns")
    print(f"{'stand-in malloc alone':24} {times[0]:6.1f} ns")
    for (name, _), t in zip(rows, times[1:]):
        print(f"{name:24} {t:6.1f} ns   {t - times[0]:+6.1f} ns")


if __name__ == "__main__":
    main()
