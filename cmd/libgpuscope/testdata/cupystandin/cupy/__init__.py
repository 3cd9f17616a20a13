"""A stand-in of what scripts/measure/interop_cupy.py's pair part and
gpuscope.use_cupy use of CuPy, with no GPU: allocations through the
allocator set (cupy.cuda.set_allocator), a CFunctionAllocator that calls
its C functions through ctypes, and a pool that hands out fake addresses.
TestTheCupyPairRunsOnAStandIn runs the part over it, so that the part the
GPU run depends on runs here first. Nothing reads or writes the memory."""
from . import cuda
from .cuda.memory import get_default_memory_pool  # noqa: F401

uint8 = "uint8"


class _Array:
    def __init__(self, mem):
        self.mem = mem


def empty(size, dtype=None):
    return _Array(cuda.get_allocator()(size))
