"""Runs matrix products and FFTs of varying sizes through CuPy, on its own
memory pool or on gpuscope, for docs/interop.md, and prints one JSON line:
a digest of every result (to compare bit for bit), the time of the timed
passes and the peak memory reserved.

    python3 interop_cupy.py pool
    GPUSCOPE_LIB=libgpuscope.so python3 interop_cupy.py gpuscope
    GPUSCOPE_LIB=libgpuscope.so python3 interop_cupy.py pair interop_freelist.so

pair times cupy.empty + del instead (issue 47), at 256 B, 1 MiB and 64 MiB,
through three allocators in one process, their rounds taking turns (CuPy
takes its allocator anew at every set_allocator): CuPy's own pool; the
minimal free list per size in CuPy's form (interop_freelist.c's
fl_cupy_malloc and fl_cupy_free) under cupy.cuda.memory.CFunctionAllocator,
the floor of that path; and gpuscope as use_cupy sets it (the same
CFunctionAllocator, over gpuscope_cupy_malloc and gpuscope_cupy_free, under
the function that raises CuPy's OutOfMemoryError), and without that function
(gpuscope-unchecked). It prints one JSON line of nanoseconds per pair, the
median of ROUNDS rounds of N pairs (and their range), gpuscope's counters
(what the pair cache served) and how use_cupy's function ran ("callable":
in C, reading the stream through CuPy's C function or not, or in Python).

A pass makes each operation's input on the device, computes, and drops
both: the allocation pattern of a program that does not keep its arrays.
The first pass computes the digest (copying each result to the host), the
next PASSES are timed with nothing copied. The pool's peak is its
total_bytes after every allocation, read by a memory hook in the first
pass only, so that the timed passes run without one; gpuscope's is its
own exact peak_reserved.
"""
import argparse
import hashlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "python"))

import cupy  # noqa: E402
import numpy  # noqa: E402


def ops(n):
    """The operations of a pass, drawn once from a seed: matrix products of
    sides 256 to 4096 and FFTs of powers of two and of 3, 5 and 7 times
    them, batched."""
    r = numpy.random.default_rng(7)
    out = []
    for _ in range(n):
        if r.random() < 0.5:
            out.append(("matmul", int(r.integers(2, 33)) * 128, int(r.integers(2, 33)) * 128, int(r.integers(2, 33)) * 128))
        else:
            length = int(r.choice([1, 3, 5, 7])) << int(r.integers(8, 16))
            out.append(("fft", int(max(1, (1 << 24) // length)), length, 0))
    return out


def run(plan, digest=None):
    rs = cupy.random.RandomState(seed=0)  # each pass draws the same inputs
    for kind, x, y, z in plan:
        if kind == "matmul":
            a = rs.standard_normal((x, y), dtype=cupy.float32)
            b = rs.standard_normal((y, z), dtype=cupy.float32)
            out = a @ b
        else:
            a = rs.standard_normal((x, y), dtype=cupy.float32).astype(cupy.complex64)
            out = cupy.fft.fft(a, axis=-1)
        if digest is not None:
            digest.update(cupy.asnumpy(out).tobytes())
        del a, out
    cupy.cuda.Device().synchronize()


def timed(plan, passes):
    """Runs plan passes times and returns each pass's seconds."""
    times = []
    for _ in range(passes):
        t = time.perf_counter()
        run(plan)
        times.append(time.perf_counter() - t)
    return times


class PoolPeak(cupy.cuda.memory_hook.MemoryHook):
    """Reads the pool's reserved bytes after each allocation: the pool grows
    only there, so the most it reads is the peak."""

    name = "PoolPeak"

    def __init__(self, pool):
        self.pool, self.peak = pool, 0

    def malloc_postprocess(self, **kw):
        self.peak = max(self.peak, self.pool.total_bytes())


SIZES = [256, 1 << 20, 64 << 20]


def pair_modes(freelist_so):
    """The allocation functions the pair part takes turns with, by name."""
    import ctypes

    import gpuscope as gs

    def addr(f):
        return ctypes.cast(f, ctypes.c_void_p).value

    fl = ctypes.CDLL(os.path.realpath(freelist_so))
    freelist = cupy.cuda.memory.CFunctionAllocator(0, addr(fl.fl_cupy_malloc), addr(fl.fl_cupy_free), fl)
    unchecked = gs.use_cupy()
    # gpuscope-unchecked: CFunctionAllocator's malloc over gpuscope without
    # use_cupy's check of the pointer (which raises CuPy's OutOfMemoryError
    # for a NULL): what the check costs a pair.
    return {"pool": cupy.get_default_memory_pool().malloc, "freelist": freelist.malloc,
            "gpuscope": cupy.cuda.get_allocator(), "gpuscope-unchecked": unchecked.malloc}, gs


def pair(freelist_so):
    """The pair part: one JSON line."""
    modes, gs = pair_modes(freelist_so)
    names = list(modes)
    n, rounds = int(os.environ.get("N", 20000)), int(os.environ.get("ROUNDS", 21))
    out = {"kind": "cupy_pair", "pairs": n, "rounds": rounds, "callable": gs._cupy_how}
    for size in SIZES:
        runs = {k: [] for k in names}
        for k in names:  # warm: each allocator caches a block of the size
            cupy.cuda.set_allocator(modes[k])
            x = cupy.empty(size, dtype=cupy.uint8)
            del x
        before = gs.stats()  # outside the timed loops: it empties the pair cache
        for r in range(rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                cupy.cuda.set_allocator(modes[k])
                t = time.perf_counter_ns()
                for _ in range(n):
                    x = cupy.empty(size, dtype=cupy.uint8)
                    del x
                runs[k].append((time.perf_counter_ns() - t) / n)
        after = gs.stats()
        out[str(size)] = {k: {"median_ns": statistics.median(v), "min_ns": min(v), "max_ns": max(v), "rounds_ns": v}
                          for k, v in runs.items()}
        # The counters are both gpuscope modes', checked and not.
        out[str(size)]["gpuscope"].update(pair_hits=after["c_pair_hits"] - before["c_pair_hits"],
                                          pair_allocs=after["c_pair_allocs"] - before["c_pair_allocs"],
                                          allocs=after["allocs"] - before["allocs"],
                                          c_failures=after["c_failures"] - before["c_failures"])
    cupy.cuda.set_allocator(modes["pool"])
    print(json.dumps(out))


def main():
    if sys.argv[1:2] == ["pair"]:
        if len(sys.argv) != 3:
            sys.exit("usage: interop_cupy.py pair FREELIST_SO")
        pair(sys.argv[2])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["pool", "gpuscope"])
    ap.add_argument("--ops", type=int, default=120)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--round", type=int, default=0, help="the harness's round, echoed in the output")
    a = ap.parse_args()
    gs = None
    if a.mode == "gpuscope":
        import gpuscope as gs

        gs.use_cupy()
    # cuFFT plans are cached by CuPy with their work areas; the cache is
    # the same in both modes.
    plan = ops(a.ops)
    digest = hashlib.sha256()
    if gs is None:
        pool = cupy.get_default_memory_pool()
        peak = PoolPeak(pool)
        with peak:
            run(plan, digest)
        times = timed(plan, a.passes)
        peak_reserved = max(peak.peak, pool.total_bytes())
    else:
        with gs.scope("cupy"):
            run(plan, digest)
            times = timed(plan, a.passes)
        peak_reserved = gs.stats()["peak_reserved"]
    print(json.dumps({
        "mode": a.mode,
        "round": a.round,
        "ops": a.ops,
        "passes": a.passes,
        "pass_ms": [1e3 * t for t in times],
        "pass_ms_min": 1e3 * min(times),
        "peak_reserved": peak_reserved,
        "digest": digest.hexdigest(),
    }))


if __name__ == "__main__":
    main()
