"""Times torch.empty + del from Python through one CUDA allocator, for
docs/interop.md, and prints one JSON line: nanoseconds per pair at 256 B,
1 MiB and 64 MiB, the median of ROUNDS rounds (and their range); for
gpuscope, how many of each size's pairs the pair cache served
(pair_hits) and how many allocations crossed into Go (allocs).

    python3 interop_pyalloc.py native                           # PyTorch's caching allocator
    python3 interop_pyalloc.py freelist interop_freelist.so     # the pluggable path over a free list per size
    GPUSCOPE_LIB=libgpuscope.so python3 interop_pyalloc.py gpuscope

freelist and gpuscope go through the same PyTorch code
(CUDAPluggableAllocator), so their difference is the allocators'; freelist
against native is what PyTorch's wrapper costs. Each mode runs in a process
of its own (PyTorch takes one allocator per process); interop-gpu.sh
alternates them.
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "python"))

import torch  # noqa: E402

SIZES = [256, 1 << 20, 64 << 20]


def main():
    mode = sys.argv[1]
    gs = None
    if mode == "gpuscope":
        import gpuscope as gs

        gs.use_torch()
    elif mode == "freelist":
        a = torch.cuda.memory.CUDAPluggableAllocator(os.path.realpath(sys.argv[2]), "fl_alloc", "fl_free")
        torch.cuda.memory.change_current_allocator(a)
    elif mode != "native":
        sys.exit(f"interop_pyalloc: unknown mode {mode} (native, freelist, gpuscope)")
    n, rounds = int(os.environ.get("N", 20000)), int(os.environ.get("ROUNDS", 7))
    out = {"mode": mode, "pairs": n, "rounds": rounds}
    for size in SIZES:
        x = torch.empty(size, dtype=torch.uint8, device="cuda")  # warm
        del x
        runs = []
        before = gs.stats() if gs else None  # outside the timed loops: it empties the pair cache
        for _ in range(rounds):
            t = time.perf_counter_ns()
            for _ in range(n):
                x = torch.empty(size, dtype=torch.uint8, device="cuda")
                del x
            runs.append((time.perf_counter_ns() - t) / n)
        out[str(size)] = {"median_ns": statistics.median(runs), "min_ns": min(runs), "max_ns": max(runs)}
        if gs:
            # Who served the size's pairs: the pair cache on the C side,
            # or Go (an allocation that crossed).
            after = gs.stats()
            out[str(size)].update(pair_hits=after["c_pair_hits"] - before["c_pair_hits"],
                                  allocs=after["allocs"] - before["allocs"],
                                  c_failures=after["c_failures"] - before["c_failures"])
    torch.cuda.synchronize()
    if gs:
        st = gs.stats()
        out["gpuscope_stats"] = {k: st.get(k) for k in ("c_pair_hits", "c_failures", "allocs", "frees", "served_from_cache", "ooms")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
