from . import memory, memory_hook  # noqa: F401

_allocator = memory.get_default_memory_pool().malloc


def set_allocator(f):
    global _allocator
    _allocator = f


def get_allocator():
    return _allocator
