"""Times an allocation and free of device memory from Python on the same
GPU, for docs/benchmarks.md: torch.empty + del through PyTorch's caching
allocator, and CuPy's MemoryPool malloc + free, at 256 B, 1 MiB and 64 MiB.
Prints one JSON object: nanoseconds per pair, the median of 5 runs."""
import json
import statistics
import time

SIZES = [256, 1 << 20, 64 << 20]


def per_pair(fn, n=20000):
    fn()  # warm the cache
    runs = []
    for _ in range(5):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter_ns() - t) / n)
    return statistics.median(runs)


out = {}
try:
    import torch

    for size in SIZES:
        def pair(size=size):
            x = torch.empty(size, dtype=torch.uint8, device="cuda")
            del x
        out[f"torch.empty+del/{size}"] = per_pair(pair)
    torch.cuda.synchronize()
except Exception as e:  # noqa: BLE001 - report, do not hide
    out["torch_error"] = repr(e)
try:
    import cupy

    pool = cupy.cuda.MemoryPool()
    for size in SIZES:
        def pair(size=size):
            m = pool.malloc(size)
            del m
        out[f"cupy.MemoryPool/{size}"] = per_pair(pair)
except Exception as e:  # noqa: BLE001
    out["cupy_error"] = repr(e)
print(json.dumps(out, indent=1))
