"""gpuscope for Python: PyTorch and CuPy allocate device memory through
gpuscope's C allocator (libgpuscope.so, built from cmd/libgpuscope), so that
one pool, one cap, one Summary and gpuscope's scopes cover what they hold.

    import gpuscope
    gpuscope.use_torch()              # before PyTorch's first CUDA allocation
    gpuscope.use_cupy()
    gpuscope.set_max_reserved(40 << 30)
    with gpuscope.scope("train"):     # what is allocated here belongs to "train"
        ...
    print(gpuscope.summary())

The module is ctypes over the library's C entry points and needs neither
PyTorch nor CuPy to import. The library is found at the path given to
load(), else $GPUSCOPE_LIB, else libgpuscope.so beside this file. One
process holds one copy of the library (it carries a Go runtime): every call
here, PyTorch's and CuPy's, goes to the copy load() opened, by the same
real path.
"""

import contextlib
import ctypes
import json
import os
import threading

__all__ = [
    "FREE_LIVE",
    "GpuscopeError",
    "load",
    "path",
    "use_torch",
    "use_cupy",
    "scope",
    "stats",
    "summary",
    "set_max_reserved",
]

# FREE_LIVE, given to scope(free_live=True) as gpuscope_scope_end's flag,
# frees what the libraries still hold in the scope when it ends; without
# it, that memory passes to the enclosing scope and is reported.
FREE_LIVE = 1


class GpuscopeError(RuntimeError):
    """A call into libgpuscope failed; the message says which and why."""


_lock = threading.Lock()  # protects _lib and _path
_lib = None
_path = None


def _default_path():
    env = os.environ.get("GPUSCOPE_LIB")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libgpuscope.so")


def load(lib_path=None):
    """Opens libgpuscope.so once per process and returns the ctypes handle.

    A second call with another path fails: two copies of the library would
    be two Go runtimes and two pools."""
    global _lib, _path
    with _lock:
        want = os.path.realpath(lib_path or _default_path())
        if _lib is not None:
            if lib_path is not None and want != _path:
                raise GpuscopeError(f"gpuscope: {_path} is already loaded; cannot load {want} beside it")
            return _lib
        if not os.path.exists(want):
            raise GpuscopeError(
                f"gpuscope: no library at {want}: build it with "
                "go build -buildmode=c-shared -o libgpuscope.so ./cmd/libgpuscope "
                "(-tags cuda for GPUs) and set GPUSCOPE_LIB or call gpuscope.load(path)"
            )
        lib = ctypes.CDLL(want)
        _declare(lib)
        _lib, _path = lib, want
        return lib


def path():
    """Returns the real path of the loaded library, loading it first."""
    load()
    return _path


def _declare(lib):
    c = ctypes
    lib.gpuscope_alloc.restype = c.c_void_p
    lib.gpuscope_alloc.argtypes = [c.c_ssize_t, c.c_int, c.c_void_p]
    lib.gpuscope_free.restype = None
    lib.gpuscope_free.argtypes = [c.c_void_p, c.c_ssize_t, c.c_int, c.c_void_p]
    lib.gpuscope_record_stream.restype = None
    lib.gpuscope_record_stream.argtypes = [c.c_void_p, c.c_void_p]
    lib.gpuscope_cupy_malloc.restype = c.c_ssize_t
    lib.gpuscope_cupy_malloc.argtypes = [c.c_ssize_t, c.c_size_t, c.c_int]
    lib.gpuscope_cupy_free.restype = None
    lib.gpuscope_cupy_free.argtypes = [c.c_ssize_t, c.c_ssize_t, c.c_int]
    lib.gpuscope_scope_begin.restype = c.c_int64
    lib.gpuscope_scope_begin.argtypes = [c.c_int, c.c_char_p]
    lib.gpuscope_scope_end.restype = c.c_int
    lib.gpuscope_scope_end.argtypes = [c.c_int64, c.c_int]
    lib.gpuscope_set_max_reserved.restype = c.c_int
    lib.gpuscope_set_max_reserved.argtypes = [c.c_int, c.c_size_t]
    for name in ("gpuscope_stats", "gpuscope_summary"):
        fn = getattr(lib, name)
        fn.restype = c.c_size_t
        fn.argtypes = [c.c_int, c.c_char_p, c.c_size_t]


def _text(fn, device):
    """Calls an snprintf-style entry point, growing the buffer until the
    text fits."""
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        n = fn(device, buf, size)
        if n < size:
            return buf.raw[:n].decode()
        size = n + 1


def use_torch(lib_path=None, streams=False):
    """Makes PyTorch allocate CUDA memory through gpuscope, for every device,
    and returns PyTorch's allocator object. Call it before PyTorch's first
    CUDA allocation: PyTorch cannot swap an allocator it has used.

    streams=True also passes Tensor.record_stream on to gpuscope, so that
    memory a side stream uses is not reused before that stream's work has
    run. PyTorch offers that hook in C++ only: the first such call compiles
    torch_streams.cpp (beside this file) against the PyTorch it runs with,
    with g++, into $GPUSCOPE_BUILD_DIR or a folder of the system's
    temporary directory, and later calls load it from there. Without it,
    record_stream does nothing under gpuscope (PyTorch's pluggable wrapper
    drops it)."""
    import torch

    load(lib_path)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(_path, "gpuscope_alloc", "gpuscope_free")
    torch.cuda.memory.change_current_allocator(alloc)
    if streams:
        _wire_record_stream()
    return alloc


_streams = None  # torch_streams.so, once loaded


def _wire_record_stream():
    global _streams
    import subprocess
    import tempfile

    import torch
    from torch.utils import cpp_extension

    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_streams.cpp")
    folder = os.environ.get("GPUSCOPE_BUILD_DIR") or os.path.join(tempfile.gettempdir(), f"gpuscope-torch-{torch.__version__}")
    so = os.path.join(folder, "torch_streams.so")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        os.makedirs(folder, exist_ok=True)
        try:
            inc = cpp_extension.include_paths(device_type="cuda")
            libs = cpp_extension.library_paths(device_type="cuda")
        except TypeError:  # PyTorch before 2.6 names it cuda=True
            inc = cpp_extension.include_paths(cuda=True)
            libs = cpp_extension.library_paths(cuda=True)
        tmp = f"{so}.{os.getpid()}"
        cmd = (["g++", "-O2", "-std=c++17", "-shared", "-fPIC",
                f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
               + [f"-I{p}" for p in inc] + [src, "-o", tmp] + [f"-L{p}" for p in libs]
               + ["-ltorch_cuda", "-lc10_cuda", "-lc10"] + [f"-Wl,-rpath,{p}" for p in libs])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise GpuscopeError(f"gpuscope: compiling {src} failed:\n{r.stderr[-4000:]}")
        os.replace(tmp, so)
    h = ctypes.CDLL(so)
    h.gpuscope_torch_record_stream.restype = ctypes.c_int
    h.gpuscope_torch_record_stream.argtypes = [ctypes.c_void_p]
    h.gpuscope_torch_record_stream_calls.restype = ctypes.c_int64
    fn = ctypes.cast(load().gpuscope_record_stream, ctypes.c_void_p)
    if h.gpuscope_torch_record_stream(fn) != 0:
        raise GpuscopeError("gpuscope: PyTorch's current allocator is not a pluggable one")
    _streams = h


def use_cupy(lib_path=None):
    """Makes CuPy allocate device memory through gpuscope (its memory pool
    is then unused), and returns CuPy's allocator object."""
    import cupy

    lib = load(lib_path)
    addr = ctypes.cast(lib.gpuscope_cupy_malloc, ctypes.c_void_p).value
    free = ctypes.cast(lib.gpuscope_cupy_free, ctypes.c_void_p).value
    alloc = cupy.cuda.memory.CFunctionAllocator(0, addr, free, lib)
    cupy.cuda.set_allocator(alloc.malloc)
    return alloc


@contextlib.contextmanager
def scope(name, device=0, free_live=False):
    """Opens a named scope on the device for the with block: what any thread
    of the process allocates through gpuscope on that device while it is
    current belongs to it (scopes nest). At its end what is still live
    passes to the enclosing scope and is reported; free_live=True frees it
    instead, for memory the libraries are done with. Yields the scope's id."""
    lib = load()
    sid = lib.gpuscope_scope_begin(device, name.encode())
    if sid <= 0:
        raise GpuscopeError(f"gpuscope: scope {name!r} on device {device} did not open (code {sid})")
    try:
        yield sid
    finally:
        rc = lib.gpuscope_scope_end(sid, FREE_LIVE if free_live else 0)
        if rc != 0:
            raise GpuscopeError(f"gpuscope: scope {name!r} on device {device} ended with code {rc}")


def stats(device=0):
    """Returns the device's Stats as a dict (the Go field names)."""
    return json.loads(_text(load().gpuscope_stats, device))


def summary(device=0):
    """Returns the device's Summary: what each scope holds, by name."""
    return _text(load().gpuscope_summary, device)


def set_max_reserved(nbytes, device=0):
    """Caps what the device's pool reserves, for every library that
    allocates through it; 0 removes the cap."""
    rc = load().gpuscope_set_max_reserved(device, nbytes)
    if rc != 0:
        raise GpuscopeError(f"gpuscope: set_max_reserved({nbytes}) on device {device} failed (code {rc})")
