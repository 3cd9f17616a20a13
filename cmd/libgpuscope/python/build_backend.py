"""The build backend of the gpuscope Python package (PEP 517), in this
folder so that `pip install ./cmd/libgpuscope/python` needs nothing from
PyPI: pyproject.toml asks for no build requirement, and this file uses
the standard library alone.

A wheel holds the package gpuscope: gpuscope.py as its __init__.py,
torch_shim.cpp, cupy_call.c, and libgpuscope.so beside them, where the
module looks for it. The library is built from this clone with the go command
(`go build -buildmode=c-shared ./cmd/libgpuscope`, Go and the Go module
proxy), with -tags from $GPUSCOPE_GO_TAGS (cuda: GPUs); or, where
$GPUSCOPE_LIB names a library built before, that one is packaged and no
Go is needed.
"""

import base64
import hashlib
import os
import shutil
import subprocess
import sysconfig
import tempfile
import zipfile

NAME = "gpuscope"
VERSION = "0.0.0"  # the module has no release yet
HERE = os.path.dirname(os.path.abspath(__file__))

METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: PyTorch and CuPy allocate GPU memory through gpuscope's pool, with scopes, one cap and one Summary
Home-page: https://github.com/gpuscope/gpuscope
Requires-Python: >=3.9
"""


def _root():
    """The clone's root: the folder up from here whose go.mod is gpuscope's."""
    d = HERE
    while True:
        mod = os.path.join(d, "go.mod")
        if os.path.exists(mod):
            with open(mod) as f:
                if f.readline().strip() == "module github.com/gpuscope/gpuscope":
                    return d
        parent = os.path.dirname(d)
        if parent == d:
            raise RuntimeError(f"gpuscope: no gpuscope clone above {HERE} to build libgpuscope.so in; "
                               "set GPUSCOPE_LIB to a library built before")
        d = parent


def _library(out):
    """Puts libgpuscope.so at out: $GPUSCOPE_LIB's, or built with go."""
    given = os.environ.get("GPUSCOPE_LIB")
    if given:
        if not os.path.isfile(given):
            where = "" if os.path.isabs(given) else (
                f" in {os.getcwd()}, where pip runs the build, not where pip was run: give an absolute path")
            raise RuntimeError(f"gpuscope: GPUSCOPE_LIB={given}: no such file{where}")
        shutil.copyfile(given, out)
        return
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("gpuscope: building libgpuscope.so needs the go command (Go 1.26, https://go.dev/dl); "
                           "or set GPUSCOPE_LIB to the absolute path of a library built before (go build "
                           "-buildmode=c-shared -o libgpuscope.so ./cmd/libgpuscope, then GPUSCOPE_LIB=$PWD/libgpuscope.so)")
    cmd = [go, "build", "-buildmode=c-shared", "-o", out]
    tags = os.environ.get("GPUSCOPE_GO_TAGS")
    if tags:
        cmd += ["-tags", tags]
    r = subprocess.run(cmd + ["./cmd/libgpuscope"], cwd=_root(), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"gpuscope: {' '.join(cmd)} ./cmd/libgpuscope failed:\n{r.stdout}{r.stderr}")


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def _wheel(wheel_directory, files):
    """Writes a wheel of files (name in the wheel: bytes) and returns its
    file name."""
    tag = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
    info = f"{NAME}-{VERSION}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = METADATA.encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: gpuscope build_backend\n"
                              f"Root-Is-Purelib: false\nTag: {tag}\n").encode()
    files[f"{info}/top_level.txt"] = f"{NAME}\n".encode()
    record = "".join(_record_line(n, d) for n, d in files.items()) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    name = f"{NAME}-{VERSION}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            entry = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = (0o755 if n.endswith(".so") else 0o644) << 16
            z.writestr(entry, d, zipfile.ZIP_DEFLATED)
    return name


def _read(name):
    with open(os.path.join(HERE, name), "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with tempfile.TemporaryDirectory() as tmp:
        lib = os.path.join(tmp, "libgpuscope.so")
        _library(lib)
        with open(lib, "rb") as f:
            so = f.read()
    return _wheel(wheel_directory, {
        f"{NAME}/__init__.py": _read("gpuscope.py"),
        f"{NAME}/torch_shim.cpp": _read("torch_shim.cpp"),
        f"{NAME}/cupy_call.c": _read("cupy_call.c"),
        f"{NAME}/libgpuscope.so": so,
    })
