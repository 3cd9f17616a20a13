import ctypes
import itertools


class OutOfMemoryError(Exception):
    def __init__(self, size, total):
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes).")


class _Mem:
    """Memory from a CFunctionAllocator: its free runs when it is dropped."""

    def __init__(self, ptr, free, param):
        self.ptr, self._free, self._param = ptr, free, param

    def __del__(self):
        if self.ptr:
            self._free(self._param, self.ptr, 0)


class CFunctionAllocator:
    def __init__(self, param, malloc_addr, free_addr, owner):
        self._param, self._owner = param, owner
        self._malloc = ctypes.CFUNCTYPE(ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_size_t, ctypes.c_int)(malloc_addr)
        self._free = ctypes.CFUNCTYPE(None, ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_int)(free_addr)

    def malloc(self, size):
        return _Mem(self._malloc(self._param, size, 0), self._free, self._param)


class _PoolMem:
    def __init__(self, pool, size, ptr):
        self._pool, self._size, self.ptr = pool, size, ptr

    def __del__(self):
        self._pool._free.setdefault(self._size, []).append(self.ptr)


class MemoryPool:
    """A free list per size over fake addresses."""

    def __init__(self):
        self._free, self._next = {}, itertools.count(1)

    def malloc(self, size):
        kept = self._free.setdefault(size, [])
        return _PoolMem(self, size, kept.pop() if kept else next(self._next) << 32)

    def total_bytes(self):
        return 0


_pool = MemoryPool()


def get_default_memory_pool():
    return _pool
