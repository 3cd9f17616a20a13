"""A stand-in of cupy_backends.cuda.stream, a Cython module of CuPy's: its
__pyx_capi__ holds get_current_stream_ptr, the C function that returns
the calling thread's current stream (which use_cupy's function calls), as
a capsule named by its signature, as Cython exports it. Here the C
function is ctypes' over the stand-in cupy's current stream."""
import ctypes

import cupy


def _current():
    return cupy.cuda.get_current_stream().ptr


_fn = ctypes.CFUNCTYPE(ctypes.c_ssize_t)(_current)
_name = ctypes.create_string_buffer(b"intptr_t (void)")
_new = ctypes.pythonapi.PyCapsule_New
_new.restype, _new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
__pyx_capi__ = {"get_current_stream_ptr": _new(ctypes.cast(_fn, ctypes.c_void_p), ctypes.addressof(_name), None)}
