"""gpuscope for Python: PyTorch and CuPy allocate device memory through
gpuscope's C allocator (libgpuscope.so, built from cmd/libgpuscope), so that
one pool, one cap, one Summary and gpuscope's scopes cover what they hold.

    import gpuscope
    gpuscope.use_torch()              # before PyTorch's first CUDA allocation
    gpuscope.use_cupy()
    gpuscope.set_max_reserved(40 << 30)
    with gpuscope.scope("train"):     # what this thread allocates here belongs to "train"
        ...
    print(gpuscope.summary())

Install it with pip install ./cmd/libgpuscope/python from a clone of
gpuscope, which builds the library with the go command (docs/interop.md).
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
import operator
import os
import sys
import threading
import warnings

__all__ = [
    "FREE_LIVE",
    "GpuscopeError",
    "GpuscopeWarning",
    "load",
    "path",
    "use_torch",
    "torch_shim",
    "use_cupy",
    "scope",
    "sleep",
    "wake",
    "end",
    "stats",
    "scope_stats",
    "summary",
    "set_max_reserved",
    "empty_cache",
]

# FREE_LIVE, given to scope(free_live=True) as gpuscope_scope_end's flag,
# frees what the libraries still hold in the scope when it ends; without
# it, that memory passes to the enclosing scope and is reported.
FREE_LIVE = 1


class GpuscopeError(RuntimeError):
    """A call into libgpuscope failed; the message says which and why."""


class GpuscopeWarning(RuntimeWarning):
    """gpuscope runs, without something it promises: use_torch could not
    build its PyTorch shim, for instance, and says why."""


# SLEEPABLE and KEEP_CONTENTS are gpuscope.h's GPUSCOPE_SLEEPABLE, for
# scope(sleepable=True), and GPUSCOPE_KEEP_CONTENTS, for sleep(keep=True).
SLEEPABLE = 1
KEEP_CONTENTS = 1

# OUT_OF_MEMORY is gpuscope.h's GPUSCOPE_OUT_OF_MEMORY: the kind of a
# failure for want of memory; INVALID_SIZE, GPUSCOPE_INVALID_SIZE: a size, a
# cap or a fraction that can never work, which this module raises as
# ValueError.
OUT_OF_MEMORY = 1
INVALID_SIZE = 3


_lock = threading.Lock()  # protects _lib, _path, _sleepers, _in_block and _cupy_ext_made


def _after_fork_in_child():
    """Gives the child of a fork a lock of its own: a thread of the parent
    may have held _lock at the fork, and the child has no such thread to
    release it. (The library fails every call in the child, at once.)"""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
_lib = None
_path = None
_sleepers = {}  # (device, name) -> the id of the sleepable scope of that name, which sleep(), wake() and end() find
_in_block = set()  # the ids of the sleepable scopes whose with block runs: their block ends them, not end()


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
                f"gpuscope: no library at {want}: install the module with pip install ./cmd/libgpuscope/python "
                "from a clone of gpuscope, which builds it; or build it beside this file with go build "
                "-buildmode=c-shared -o cmd/libgpuscope/python/libgpuscope.so ./cmd/libgpuscope (-tags cuda "
                "for GPUs), or name it in GPUSCOPE_LIB or gpuscope.load(path)"
            )
        lib = ctypes.CDLL(want)
        _declare(lib)
        # The library's messages advise this module's calls, not C's.
        lib.gpuscope_name_call(b"gpuscope_set_max_reserved", b"gpuscope.set_max_reserved")
        lib.gpuscope_name_call(b"gpuscope_empty_cache", b"gpuscope.empty_cache")
        # Each failure of a call that says it failed is raised, with the
        # message (this module's calls, use_torch's shim, use_cupy's
        # function): the library need not write it to standard error too.
        lib.gpuscope_print_failures(0)
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
    lib.gpuscope_cupy_stream_malloc.restype = c.c_ssize_t
    lib.gpuscope_cupy_stream_malloc.argtypes = [c.c_ssize_t, c.c_size_t, c.c_int]
    lib.gpuscope_cupy_stream_free.restype = None
    lib.gpuscope_cupy_stream_free.argtypes = [c.c_ssize_t, c.c_ssize_t, c.c_int]
    lib.gpuscope_scope_begin.restype = c.c_int64
    lib.gpuscope_scope_begin.argtypes = [c.c_int, c.c_char_p]
    lib.gpuscope_scope_begin_flags.restype = c.c_int64
    lib.gpuscope_scope_begin_flags.argtypes = [c.c_int, c.c_char_p, c.c_int]
    lib.gpuscope_scope_sleep.restype = c.c_int
    lib.gpuscope_scope_sleep.argtypes = [c.c_int64, c.c_int]
    lib.gpuscope_scope_wake.restype = c.c_int
    lib.gpuscope_scope_wake.argtypes = [c.c_int64]
    lib.gpuscope_scope_end.restype = c.c_int
    lib.gpuscope_scope_end.argtypes = [c.c_int64, c.c_int]
    lib.gpuscope_scope_bind.restype = c.c_int
    lib.gpuscope_scope_bind.argtypes = [c.c_int64, c.c_void_p]
    lib.gpuscope_set_max_reserved.restype = c.c_int
    lib.gpuscope_set_max_reserved.argtypes = [c.c_int, c.c_size_t]
    lib.gpuscope_set_memory_fraction.restype = c.c_int
    lib.gpuscope_set_memory_fraction.argtypes = [c.c_int, c.c_double]
    lib.gpuscope_empty_cache.restype = c.c_int
    lib.gpuscope_empty_cache.argtypes = [c.c_int]
    lib.gpuscope_name_call.restype = c.c_int
    lib.gpuscope_name_call.argtypes = [c.c_char_p, c.c_char_p]
    lib.gpuscope_last_error.restype = c.c_size_t
    lib.gpuscope_last_error.argtypes = [c.c_char_p, c.c_size_t, c.POINTER(c.c_int)]
    lib.gpuscope_print_failures.restype = c.c_int
    lib.gpuscope_print_failures.argtypes = [c.c_int]
    for name in ("gpuscope_stats", "gpuscope_summary"):
        fn = getattr(lib, name)
        fn.restype = c.c_size_t
        fn.argtypes = [c.c_int, c.c_char_p, c.c_size_t]
    lib.gpuscope_scope_stats.restype = c.c_size_t
    lib.gpuscope_scope_stats.argtypes = [c.c_int64, c.c_char_p, c.c_size_t]


def _text(fn, *args):
    """Calls an snprintf-style entry point, growing the buffer until the
    text fits."""
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        n = fn(*args, buf, size)
        if n < size:
            return buf.raw[:n].decode(errors="replace")
        size = n + 1


def _last_failure():
    """The message of this thread's last failed call into the library, and
    its kind (gpuscope.h's GPUSCOPE_OUT_OF_MEMORY, ...)."""
    kind = ctypes.c_int(0)
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        n = load().gpuscope_last_error(buf, size, ctypes.byref(kind))
        if n < size:
            return buf.raw[:n].decode(errors="replace"), kind.value
        size = n + 1


def _last_error():
    """The message of this thread's last failed call into the library, and
    whether it failed for want of memory."""
    msg, kind = _last_failure()
    return msg, kind == OUT_OF_MEMORY


def _failure(call, c_call):
    """The exception of call, as the caller wrote it, which failed in the
    library's c_call: ValueError for a size that can never work,
    GpuscopeError otherwise, each with the library's message."""
    msg, kind = _last_failure()
    msg = msg.removeprefix(c_call + ": ")  # the library names its C call; the caller made call
    return (ValueError if kind == INVALID_SIZE else GpuscopeError)(f"gpuscope: {call}: {msg}")


def _int(value, what):
    """value as an int, where it is one or says it stands for one
    (__index__: NumPy's integers, say); a bool is not one, nor a float:
    TypeError."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"gpuscope: {what} must be an int, not {type(value).__name__}")


def _device(device, what="device", low=0):
    """device, checked: an int from low (-1: every device, where a call
    takes that) to what a C int holds."""
    device = _int(device, what)
    if not low <= device < 1 << 31:
        raise ValueError(f"gpuscope: {what} {device}: no such device (devices are numbered from 0)")
    return device


def use_torch(lib_path=None, shim=True):
    """Makes PyTorch allocate CUDA memory through gpuscope, for every device,
    and returns PyTorch's allocator object. Call it before PyTorch's first
    CUDA allocation: PyTorch cannot swap an allocator it has used.

    PyTorch's Python wrapper (torch.cuda.memory.CUDAPluggableAllocator)
    takes an allocation and a free function and nothing else: it stores a
    refused allocation's NULL as the tensor's address, and drops
    Tensor.record_stream, torch.cuda.empty_cache and
    set_per_process_memory_fraction. Its C++ class has the hooks, so
    use_torch compiles torch_shim.cpp (beside this file) against the
    PyTorch it runs with, with g++, into $GPUSCOPE_BUILD_DIR or the user's
    cache, ~/.cache/gpuscope (once; later calls load it from there), and
    wires them: an allocation past the cap raises
    torch.cuda.OutOfMemoryError with gpuscope's message, record_stream
    keeps memory from reuse until the stream's work has run, and
    empty_cache and the memory fraction act on gpuscope's pool.

    Where the shim cannot be built (no g++, no PyTorch headers), use_torch
    warns (GpuscopeWarning) with why, and PyTorch runs over the wrapper
    alone; torch_shim() says which. shim=False asks for the wrapper alone:
    the harness's control, nothing a user wants."""
    import torch

    load(lib_path)
    global _shim, _shim_why
    h, why = None, "use_torch(shim=False)"
    if shim:
        try:
            h = _load_shim(_build_shim())
        except (GpuscopeError, OSError) as e:
            why = str(e)
    if h is None:
        _shim, _shim_why = None, why
        # PyTorch's wrapper alone stores a refused allocation's NULL and
        # raises nothing: the library writes the failures again.
        load().gpuscope_print_failures(1)
        if shim:
            warnings.warn(
                f"gpuscope: PyTorch runs without gpuscope's shim ({why}): an allocation past the cap gives "
                "a tensor at address 0 instead of torch.cuda.OutOfMemoryError, Tensor.record_stream does "
                "nothing, and torch.cuda.empty_cache and set_per_process_memory_fraction do not reach "
                "gpuscope", GpuscopeWarning, stacklevel=2)
        alloc = torch.cuda.memory.CUDAPluggableAllocator(_path, "gpuscope_alloc", "gpuscope_free")
        torch.cuda.memory.change_current_allocator(alloc)
        return alloc
    alloc = torch.cuda.memory.CUDAPluggableAllocator(h._name, "gpuscope_torch_alloc", "gpuscope_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    if h.gpuscope_torch_wire() != 0:
        raise GpuscopeError("gpuscope: PyTorch's current allocator is not the pluggable one use_torch made")
    _shim, _shim_why = h, None
    return alloc


_shim = None  # torch_shim.so, once wired
_shim_why = "use_torch() was not called"

# The counters of torch_shim.cpp's gpuscope_torch_count, in its order; the
# last says whether the graph-pool hooks refuse (1), where this PyTorch's
# wrapper has them.
_SHIM_COUNTS = ("record_stream", "out_of_memory", "empty_cache", "memory_fraction", "graphs_refused")


def torch_shim():
    """Says whether use_torch wired its PyTorch shim: {"wired": True, and
    how many record_stream calls, out-of-memory errors, empty_cache calls
    and memory fractions it passed on or raised, and whether CUDA graph
    capture is refused (graphs_refused: 1; 0 where this PyTorch's wrapper
    has no graph-pool hook of the shape the shim knows)}, or {"wired":
    False, "why": ...}."""
    if _shim is None:
        return {"wired": False, "why": _shim_why}
    return dict({"wired": True}, **{k: _shim.gpuscope_torch_count(i) for i, k in enumerate(_SHIM_COUNTS)})


def _build_shim():
    """Compiles torch_shim.cpp against the PyTorch imported, once for this
    source and PyTorch, and returns the library's path; raises
    GpuscopeError with why it could not.

    The library goes into $GPUSCOPE_BUILD_DIR, else the user's cache
    ($XDG_CACHE_HOME or ~/.cache)/gpuscope/torch-VERSION, as PyTorch's
    extensions go to ~/.cache/torch_extensions: a fixed folder of the
    system's temporary one could be another user's, with a library of
    theirs in it; a folder of the cache that another user owns, or that
    others can write, is refused. Its name holds a digest of the source, so
    that a new gpuscope never loads the shim of an old one."""
    import torch

    src, digest = _source("torch_shim.cpp")
    so = os.path.join(_build_folder(f"torch-{torch.__version__}"), f"torch_shim-{digest}.so")
    if os.path.exists(so):
        return so
    try:
        from torch.utils import cpp_extension

        try:
            inc = cpp_extension.include_paths(device_type="cuda")
            libs = cpp_extension.library_paths(device_type="cuda")
        except TypeError:  # PyTorch before 2.6 names it cuda=True
            inc = cpp_extension.include_paths(cuda=True)
            libs = cpp_extension.library_paths(cuda=True)
    except Exception as e:  # noqa: BLE001 - any failure here is why the shim is missing
        raise GpuscopeError(f"PyTorch's headers were not found: {type(e).__name__}: {e}") from e
    tmp = f"{so}.{os.getpid()}.{threading.get_ident()}"
    cmd = (["g++", "-O2", f"-std={_cxx_standard(torch.__version__)}", "-shared", "-fPIC",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
           + [f"-I{p}" for p in inc] + [src, "-o", tmp] + [f"-L{p}" for p in libs]
           + ["-ltorch_cuda", "-lc10_cuda", "-lc10"] + [f"-Wl,-rpath,{p}" for p in libs])
    _compile(cmd, src, tmp, so)
    return so


def _source(name):
    """The path of the source name beside this file, and a digest of it
    for the name of what is built from it, so that a new gpuscope never
    loads what an old one built."""
    import hashlib

    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    with open(src, "rb") as f:
        return src, hashlib.sha256(f.read()).hexdigest()[:16]


def _build_folder(kind):
    """The folder of what this module compiles, for kind: $GPUSCOPE_BUILD_DIR,
    else (the user's cache)/gpuscope/kind, made, and refused where another
    user owns it or others can write it (_only_mine)."""
    folder = os.environ.get("GPUSCOPE_BUILD_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)  # the user's choice
        return folder
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gpuscope")
    folder = os.path.join(cache, kind)
    for f in (cache, folder):
        os.makedirs(f, mode=0o700, exist_ok=True)
        _only_mine(f)
    return folder


def _compile(cmd, src, tmp, so):
    """Runs cmd, a compiler's command that builds src into tmp, and moves
    tmp to so; raises GpuscopeError with the compiler's errors."""
    import subprocess

    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise GpuscopeError(f"{cmd[0]} could not run: {e}") from e
    if r.returncode != 0:
        raise GpuscopeError(f"compiling {src} failed:\n{r.stderr[-4000:]}")
    os.replace(tmp, so)


def _cxx_standard(version):
    """The C++ standard PyTorch's headers of version need: C++20 from
    PyTorch 2.13 on ("C++20 or later compatible compiler is required to use
    ATen"), C++17 before, as its cpp_extension picks."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return "c++17"
    return "c++20" if (major, minor) >= (2, 13) else "c++17"


def _only_mine(path):
    """Raises GpuscopeError where the folder path is another user's, or
    others can write it: the shim is loaded from there."""
    st = os.stat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise GpuscopeError(f"{path} is owned by uid {st.st_uid} with mode {st.st_mode & 0o777:o}, and others can write it: "
                            "gpuscope loads no library from there; set GPUSCOPE_BUILD_DIR to a folder of yours alone")


class _TorchFns(ctypes.Structure):
    """torch_shim.cpp's gpuscope_torch_fns: libgpuscope's functions."""
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("alloc", "free", "record_stream", "last_error", "empty_cache", "set_memory_fraction")]


def _load_shim(so):
    """Loads the shim at so and hands it this process's libgpuscope."""
    h = ctypes.CDLL(so)
    h.gpuscope_torch_init.restype = ctypes.c_int
    h.gpuscope_torch_init.argtypes = [ctypes.POINTER(_TorchFns)]
    h.gpuscope_torch_wire.restype = ctypes.c_int
    h.gpuscope_torch_count.restype = ctypes.c_int64
    h.gpuscope_torch_count.argtypes = [ctypes.c_int]
    lib = load()
    fns = _TorchFns(*(ctypes.cast(getattr(lib, "gpuscope_" + name), ctypes.c_void_p)
                      for name in ("alloc", "free", "record_stream", "last_error", "empty_cache",
                                   "set_memory_fraction")))
    if h.gpuscope_torch_init(ctypes.byref(fns)) != 0:
        raise GpuscopeError(f"{so} refused libgpuscope's functions")
    return h


def use_cupy(lib_path=None):
    """Makes CuPy allocate device memory through gpuscope (its memory pool
    is then unused), and returns CuPy's allocator object for the default
    stream. An allocation gpuscope refuses for want of memory raises
    cupy.cuda.memory.OutOfMemoryError, with gpuscope's message as a note
    and its cause: CuPy's CFunctionAllocator takes a NULL for an array at
    address 0, so the callable given to cupy.cuda.set_allocator checks the
    pointer first. That callable runs in C (cupy_call.c, beside this file,
    which use_cupy compiles with cc against this Python's headers, once,
    into the folder where use_torch builds its shim); where it cannot be
    built, use_cupy warns (GpuscopeWarning) with why, and it runs in Python,
    a Python call more for every CuPy allocation.

    CuPy's pool keeps a block freed under a stream for that stream's later
    allocations, since kernels queued there may still read it; its
    CFunctionAllocator passes gpuscope no stream. So the callable hands an
    allocation made under another stream than the default one to a
    CFunctionAllocator of that stream's (gpuscope_cupy_stream_malloc): the
    block is reused at once on that stream, and on another only once the
    work queued on it at the free has completed. gpuscope waits on such a
    stream later, so the callable keeps each stream object it met alive
    for the process's life (CuPy destroys a stream when its object goes)."""
    import cupy

    global _cupy_how
    lib = load(lib_path)
    ext, why = _cupy_ext()
    if ext is None:
        warnings.warn(f"gpuscope: CuPy's allocation function runs in Python ({why}): each CuPy allocation "
                      "pays a Python call more than in C", GpuscopeWarning, stacklevel=2)

    def addr(name):
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value

    malloc, stream_malloc = addr("gpuscope_cupy_malloc"), addr("gpuscope_cupy_stream_malloc")
    if ext is not None:  # cupy_call.c's over them, which tell it of a NULL
        malloc, stream_malloc = ext.wrap(malloc, stream_malloc)
    alloc = cupy.cuda.memory.CFunctionAllocator(0, malloc, addr("gpuscope_cupy_free"), lib)

    def on_stream(stream):
        return cupy.cuda.memory.CFunctionAllocator(stream.ptr, stream_malloc, addr("gpuscope_cupy_stream_free"),
                                                   (lib, stream)).malloc

    capsule = _cupy_stream_capsule()
    malloc = _cupy_malloc(alloc.malloc, on_stream, cupy.cuda.get_current_stream, cupy.cuda.memory.OutOfMemoryError,
                          capsule=capsule, ext=ext, record=_cupy_stream_record(ext, capsule))
    cupy.cuda.set_allocator(malloc)
    _cupy_how = ("C, the stream from CuPy's record of the thread" if getattr(malloc, "record", False) else
                 "C, the stream from CuPy's C function" if getattr(malloc, "c_stream", False) else
                 "C, the stream from cupy.cuda.get_current_stream" if ext is not None else f"Python: {why}")
    return alloc


# How use_cupy's allocation function runs, for the harness's report: in C
# (cupy_call.c), reading the stream from CuPy's record of the thread, through
# CuPy's C function or through cupy.cuda.get_current_stream, or in Python,
# and why.
_cupy_how = "use_cupy() was not called"


def _cupy_stream_capsule():
    """CuPy's C function that returns the calling thread's current stream
    (get_current_stream_ptr, which its pool calls), as the capsule its
    Cython module exports for cimport; None where it exports none."""
    import importlib

    for name in ("cupy_backends.cuda.stream", "cupy.cuda.stream"):
        try:
            capi = getattr(importlib.import_module(name), "__pyx_capi__", {})
        except ImportError:
            continue
        if "get_current_stream_ptr" in capi:
            return capi["get_current_stream_ptr"]
    return None


def _cupy_stream_record(ext, capsule):
    """Where cupy_call.c's Malloc can read the calling thread's current
    stream without a call of CuPy's C function: (local, kind, offset), the
    threading.local in which cupy_backends.cuda.stream keeps each thread's
    record (as "tls"), the records' type (its _ThreadLocal) and where a
    record keeps its list of handles, one a device (CuPy 14's layout),
    which ext.record_offset checked by setting the stream through CuPy's
    set_current_stream_ptr and reading it back; None where there is none
    such (another CuPy, no C function, no compiler). CuPy's function looks
    the record up in the threading.local and asks CUDA for the current
    device at every call; Malloc keeps a reference to each thread's record
    instead and reads its handle where the process has one device."""
    import gc
    import importlib

    try:
        mod = importlib.import_module("cupy_backends.cuda.stream")
    except ImportError:
        return None
    kind = getattr(mod, "_ThreadLocal", None)
    put = getattr(mod, "__pyx_capi__", {}).get("set_current_stream_ptr")
    if ext is None or capsule is None or put is None or not isinstance(kind, type):
        return None
    collecting = gc.isenabled()
    gc.disable()  # a finalizer allocating while record_offset sets probes would see them as its stream
    try:
        ext.stream_of(capsule)  # makes this thread's record
        local = next((o for o in gc.get_objects() if _per_thread_state(o) and type(vars(o).get("tls")) is kind), None)
        if local is None:
            return None
        offset = ext.record_offset(vars(local)["tls"], capsule, put)
    except TypeError:  # a capsule of another signature
        return None
    finally:
        if collecting:
            gc.enable()
    return (local, kind, offset) if offset >= 0 else None


def _per_thread_state(o):
    """Whether o is CPython's threading.local, one dict per Python thread
    state, which a Malloc's record read assumes: not a local that
    threading.local names after monkey-patching (gevent's, one per
    greenlet, of which a thread state has many)."""
    t = type(o)
    return t.__module__ == "_thread" and t.__qualname__ == "_local"


# cudaStreamLegacy (1) and cudaStreamPerThread (2): with NULL, the
# handles of a default stream. The per-thread one names each thread's own,
# which gpuscope cannot tell apart (it would wait for the calling thread's
# alone): its blocks stay the legacy default stream's, whose work waits for
# every thread's default stream.
_PER_THREAD = 2


def _cupy_malloc(malloc, on_stream, current_stream, oom, capsule=None, ext=None, record=None):
    """CuPy's allocation function: CFunctionAllocator's malloc on a default
    stream, else on_stream(stream)'s, made once a stream (a stream's ptr
    names it: CuPy's streams compare so); it raises oom (CuPy's
    OutOfMemoryError) where it got NULL. With ext, cupy_call.c's module
    (_cupy_ext), it is ext.Malloc, which does the same in C, reading the
    stream through capsule (_cupy_stream_capsule) where it is CuPy's C
    function, and after a thread's first call from the thread's record
    where record (_cupy_stream_record) says where; else a Python function."""
    streams = {}  # a stream's ptr -> its allocation function; holds the stream
    lock = threading.Lock()

    def stream_malloc(stream):
        with lock:
            if stream.ptr not in streams:
                streams[stream.ptr] = on_stream(stream)
            return streams[stream.ptr]

    def raise_oom(size):
        _raise_cupy_oom(size, oom)

    if ext is not None:
        return ext.Malloc(malloc, streams, lambda: stream_malloc(current_stream()), current_stream, capsule, raise_oom,
                          record)

    def gpuscope_malloc(size):
        s = current_stream().ptr
        mem = (malloc if s <= _PER_THREAD else streams.get(s) or stream_malloc(current_stream()))(size)
        if mem.ptr == 0 and size:
            raise_oom(size)
        return mem
    return gpuscope_malloc


_cupy_ext_made = None  # (module, why): _cupy_ext's, once


def _cupy_ext():
    """cupy_call.c (beside this file) compiled against this Python's headers
    and loaded, once a process, and None; or None and why it could not be.

    The library goes where use_torch's shim goes (_build_folder), its name
    holding a digest of the source and this Python's extension suffix."""
    global _cupy_ext_made
    with _lock:
        if _cupy_ext_made is None:
            try:
                _cupy_ext_made = _load_ext("_gpuscope_cupy", _build_cupy_ext()), None
            except (GpuscopeError, OSError, ImportError) as e:
                _cupy_ext_made = None, str(e)
        return _cupy_ext_made


def _build_cupy_ext():
    import shutil
    import sysconfig

    src, digest = _source("cupy_call.c")
    so = os.path.join(_build_folder("python"), f"cupy_call-{digest}{sysconfig.get_config_var('EXT_SUFFIX')}")
    if os.path.exists(so):
        return so
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise GpuscopeError(f"no Python.h in {include}: this Python's headers (a python3-dev package) are not installed")
    cc = os.environ.get("CC", "").split() or [shutil.which("cc") or shutil.which("gcc") or "cc"]
    tmp = f"{so}.{os.getpid()}.{threading.get_ident()}"
    _compile(cc + ["-O2", "-shared", "-fPIC", "-pthread", f"-I{include}", src, "-o", tmp], src, tmp, so)
    return so


def _load_ext(name, so):
    """Loads the extension module name from the file so."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(name, so)
    spec = importlib.util.spec_from_file_location(name, so, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _raise_cupy_oom(size, oom):
    msg, out_of_memory = _last_error()
    cause = GpuscopeError(f"gpuscope: {msg}")
    if not out_of_memory:
        raise cause
    e = oom(size, stats().get("allocated", 0))
    if hasattr(e, "add_note"):
        e.add_note(f"gpuscope: {msg}")
    raise e from cause


@contextlib.contextmanager
def scope(name, device=0, free_live=False, stream=None, sleepable=False):
    """Opens a scope named name (None: unnamed, as C's NULL) on the device
    for the with block, for this thread: what the thread allocates through gpuscope on that device
    belongs to it, and scopes the thread opens inside it nest in it. Other
    threads' scopes are its siblings and end apart from it; a thread with
    no scope allocates in the device's root scope. The scope is the
    thread's, not an asyncio task's: a task that holds it across an await
    shares it with the thread's other tasks (docs/interop.md). stream binds the scope
    to a stream (a handle, or an object with cuda_stream or ptr, as
    torch.cuda.Stream and cupy.cuda.Stream have): a thread with no scope of
    its own that allocates for that stream, such as PyTorch's autograd
    thread running a backward pass, allocates in it. At its end what is
    still live passes to the enclosing scope and is reported;
    free_live=True frees it instead, for memory the libraries are done
    with. Yields the scope's id.

    sleepable=True opens a scope whose memory can sleep (docs/sleep.md):
    sleep(name) gives the device memory under what was allocated in it
    back to the driver, keeping the addresses (a tensor's data_ptr()), and
    wake(name) maps memory at them again. Its end passes nothing on: where
    the libraries still hold memory in it, it stays open under its name,
    no longer the thread's, to sleep and wake, until end(name) (or
    free_live=True frees what it holds at the end of the block).

    An error at the scope's end never replaces an exception of the block:
    that exception propagates with the error as a note (printed where
    Python has no notes); without one, the error is raised."""
    device = _device(device)
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"gpuscope: a scope's name must be a str, or None for an unnamed scope, not {type(name).__name__}")
        if name == "" or "/" in name or "\0" in name:
            raise ValueError(f"gpuscope: scope name {name!r}: a name is not empty and holds no \"/\" (which joins the names "
                             "of a path: open a scope inside another to nest it) nor NUL; None opens an unnamed scope")
    lib = load()
    if sleepable:
        sid = _begin_sleepable(lib, name, device)
    else:
        sid = lib.gpuscope_scope_begin(device, None if name is None else name.encode())
    if sid <= 0:
        raise _failure(f"scope({name!r}, device={device})", "gpuscope_scope_begin")
    try:
        try:
            if stream is not None and lib.gpuscope_scope_bind(sid, _stream_handle(stream)) != 0:
                raise GpuscopeError(f"gpuscope: scope {name!r} could not be bound to stream {stream!r}: {_last_error()[0]}")
        except BaseException:
            lib.gpuscope_scope_end(sid, FREE_LIVE if free_live else 0)
            raise
        try:
            yield sid
        except BaseException as e:
            if lib.gpuscope_scope_end(sid, FREE_LIVE if free_live else 0) != 0:
                note = f"gpuscope: scope {name!r} on device {device} also failed to end: {_last_error()[0]}"
                if hasattr(e, "add_note"):
                    e.add_note(note)
                else:
                    print(note, file=sys.stderr)
            raise
        if lib.gpuscope_scope_end(sid, FREE_LIVE if free_live else 0) != 0:
            raise GpuscopeError(f"gpuscope: scope {name!r} on device {device} did not end: {_last_error()[0]}")
    finally:
        if sleepable:
            with _lock:
                _in_block.discard(sid)  # end(name) may end it from now on


def _begin_sleepable(lib, name, device):
    """Begins the sleepable scope name on the device, which sleep() and
    wake() find by its name (a later one of the same name takes it), and
    returns its id."""
    if name is None:
        raise ValueError("gpuscope: a sleepable scope has a name: sleep(name) and wake(name) find it by it")
    with _lock:
        sid = lib.gpuscope_scope_begin_flags(device, name.encode(), SLEEPABLE)
        if sid <= 0:
            raise _failure(f"scope({name!r}, device={device}, sleepable=True)", "gpuscope_scope_begin_flags")
        _sleepers[(device, name)] = sid
        _in_block.add(sid)
        return sid


def _sleeper(name, device):
    """The id of the sleepable scope name on the device: the last begun,
    open or not (the library says which)."""
    device = _device(device)
    with _lock:
        sid = _sleepers.get((device, name))
    if sid is None:
        raise GpuscopeError(f"gpuscope: no sleepable scope named {name!r} on device {device} "
                            "(scope(name, sleepable=True) opens one)")
    return sid


def sleep(name, keep=True, device=0):
    """Puts the sleepable scope name to sleep: what PyTorch and CuPy
    queued on the device is waited for first (their synchronize, where
    this process imported them), then, with keep, what its memory holds is
    copied to page-locked host memory, and the device memory goes back to
    the driver, its addresses kept. keep=False drops the contents: they
    wake as zeros (a KV cache, activations). Until wake(name) the memory
    must not be used: a kernel on it faults. A tensor freed meanwhile (del,
    the garbage collector) is freed: its memory is no longer the scope's
    to wake, and nothing is copied back into it."""
    sid = _sleeper(name, device)
    for fw, sync in (("torch", lambda m: m.cuda.is_initialized() and m.cuda.synchronize(device)),
                     ("cupy", lambda m: m.cuda.Device(device).synchronize())):  # the scope's device, not the current one
        if fw in sys.modules:
            sync(sys.modules[fw])
    if load().gpuscope_scope_sleep(sid, KEEP_CONTENTS if keep else 0) != 0:
        raise _failure(f"sleep({name!r}, keep={keep})", "gpuscope_scope_sleep")


def wake(name, device=0):
    """Wakes the sleepable scope name: new device memory at the addresses
    it had, holding what sleep kept, or zeros. Where the device (or the
    cap) has no room it raises GpuscopeError and the scope sleeps on, its
    contents kept, for a later wake."""
    if load().gpuscope_scope_wake(_sleeper(name, device)) != 0:
        raise _failure(f"wake({name!r})", "gpuscope_scope_wake")


def end(name, free_live=False, device=0):
    """Ends the sleepable scope name that its with block left open
    because PyTorch or CuPy still held memory in it, asleep or awake, as
    gpuscope_scope_end does: what it holds goes back to the device's pool
    without a wake, and sleep(name), wake(name) and end(name) find it no
    more. Where they still hold memory in it (drop the tensors first: a
    tensor freed asleep is freed), it stays open and GpuscopeError says
    how much; free_live=True frees that memory all the same, for tensors
    that are no longer used (a later free of one fails and is counted).
    A scope whose block is running ends with its block; one that ended
    there, holding nothing, is no longer open: both are GpuscopeError."""
    device = _device(device)
    sid = _sleeper(name, device)
    with _lock:
        if sid in _in_block:
            raise GpuscopeError(f"gpuscope: end({name!r}): its with block is running, and ends it")
    lib = load()
    if not free_live:
        try:
            held = scope_stats(sid)
        except GpuscopeError as e:
            msg = _last_error()[0].removeprefix("gpuscope_scope_stats: ")
            raise GpuscopeError(f"gpuscope: end({name!r}): {msg}") from e
        if held["live"] > 0:
            raise GpuscopeError(f"gpuscope: end({name!r}): PyTorch or CuPy still hold {held['live']} bytes in scope "
                                f"{held['path']!r}: it stays open; drop them first, or end({name!r}, free_live=True) "
                                "frees them")
    if lib.gpuscope_scope_end(sid, FREE_LIVE if free_live else 0) != 0:
        raise _failure(f"end({name!r}, free_live={free_live})", "gpuscope_scope_end")
    with _lock:
        if _sleepers.get((device, name)) == sid:
            del _sleepers[(device, name)]


def _stream_handle(stream):
    """The cudaStream_t of stream: an int, or a framework's stream object."""
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr)) or None
    return int(stream) or None


def stats(device=0):
    """Returns the device's Stats as a dict (the Go field names); raises
    GpuscopeError where the device cannot be opened."""
    st = json.loads(_text(load().gpuscope_stats, _device(device)))
    if "error" in st:  # the C call's way to say it has no counters
        raise GpuscopeError(f"gpuscope: stats(device={device}): {st['error']}")
    return st


def scope_stats(sid):
    """Returns the counters of the open scope sid (what scope() yields) as
    a dict: "path", "live" (its bytes, its children's with them), "peak",
    "allocations" (its own buffers), "children"."""
    text = _text(load().gpuscope_scope_stats, _int(sid, "a scope's id"))
    if not text:
        raise GpuscopeError(f"gpuscope: no stats of scope {sid}: {_last_error()[0]}")
    return json.loads(text)


def summary(device=0):
    """Returns the device's Summary: what each scope holds, by name; raises
    GpuscopeError where the device cannot be opened."""
    stats(device)  # the C call writes why there is no summary as the summary
    return _text(load().gpuscope_summary, device)


def set_max_reserved(nbytes, device=0):
    """Caps what the device's pool reserves, for every library that
    allocates through it; 0 removes the cap. The pool reserves whole pages
    (2 MiB on the host device and most GPUs): a cap below one page, which
    no allocation could fit under, is a ValueError, as is a negative one."""
    nbytes = _int(nbytes, "a cap in bytes")
    device = _device(device)
    if not 0 <= nbytes < 1 << 63:
        raise ValueError(f"gpuscope: set_max_reserved({nbytes}): a cap is from 0 (none) to 2**63-1 bytes")
    if load().gpuscope_set_max_reserved(device, nbytes) != 0:
        raise _failure(f"set_max_reserved({nbytes}, device={device})", "gpuscope_set_max_reserved")


def empty_cache(device=-1):
    """Gives what the device's pool caches back to the driver; device -1:
    every device the library opened. Under use_torch,
    torch.cuda.empty_cache() does the same."""
    if load().gpuscope_empty_cache(_device(device, low=-1)) != 0:
        raise _failure(f"empty_cache(device={device})", "gpuscope_empty_cache")
