class MemoryHook:
    pass
