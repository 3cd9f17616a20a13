"""A stand-in of cupy_backends.cuda.stream, a Cython module of CuPy's:
_stream.c (beside this file, which this module compiles with cc against
this Python's headers, once a process, into GPUSCOPE_BUILD_DIR or a
temporary folder) keeps each thread's current stream in a record with
Cython's layout, in a threading.local, and exports get_current_stream_ptr
and set_current_stream_ptr as Cython does, in __pyx_capi__. use(ptr) sets
the calling thread's stream, as a CuPy stream's use() does; records,
calls_on_one_thread, fail_after, devices and device are for tests
(_stream.c says what they do)."""
import importlib.machinery
import importlib.util
import os
import subprocess
import sysconfig
import tempfile


def compiled():
    """_stream.c, compiled and loaded."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_stream.c")
    out = os.environ.get("GPUSCOPE_BUILD_DIR") or tempfile.mkdtemp(prefix="cupystandin")
    so = os.path.join(out, f"cupystandin_stream-{os.getpid()}{sysconfig.get_config_var('EXT_SUFFIX')}")
    if not os.path.exists(so):
        include = sysconfig.get_paths()["include"]
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-pthread", f"-I{include}", src, "-o", so],
                       check=True)
    loader = importlib.machinery.ExtensionFileLoader("_stream", so)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_file_location("_stream", so, loader=loader))
    loader.exec_module(mod)
    return mod


_c = compiled()
_ThreadLocal, __pyx_capi__, use, records, calls_on_one_thread, fail_after, devices, device = (
    _c._ThreadLocal, _c.__pyx_capi__, _c.use, _c.records, _c.calls_on_one_thread, _c.fail_after, _c.devices,
    _c.device)
