"""Issue 46 on a GPU: PyTorch's weights in a sleepable scope of gpuscope's,
put to sleep and woken, with what the driver and the model say of it. Each
line it prints is one JSON object (an "event"); sleep_report.py reads them.

    python3 sleep_torch.py gpuscope [--gib 10] [--cycles 20]   # through libgpuscope (GPUSCOPE_LIB)
    python3 sleep_torch.py gpuscope --small                     # a short run, for compute-sanitizer
    python3 sleep_torch.py tms [--gib 10] [--cycles 20]         # torch_memory_saver, where installed

gpuscope: the host link's copy bandwidth first (page-locked memory, both
ways, in this process); then a model of --gib GiB of float32 weights made
in gpuscope.scope("weights", sleepable=True) and its output on a fixed
input; gpuscope.sleep("weights", keep=True), with the driver's free memory
(cudaMemGetInfo) before and after; CuPy (its own allocator, else
cudaMalloc through ctypes) allocating what the scope gave back, writing it
and freeing it; gpuscope.wake("weights"); the weights' data_ptr() and the
model's output, compared bit for bit; --cycles more cycles with the
driver's and gpuscope's figures after each; a KV cache in a sleepable scope
put to sleep without its contents, which must wake as zeros; a tensor freed
while its scope sleeps, beside one that must wake with its bytes, and the
scope then ended (gpuscope.end).
"""
import argparse
import ctypes
import json
import os
import sys
import time

# The same output bit for bit asks the same kernels of cuBLAS each time.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

WIDTH = 8192  # a layer's weights: WIDTH x WIDTH float32, 256 MiB
BATCH = 64


def emit(**kw):
    print(json.dumps(kw), flush=True)


def forward(torch, layers, x):
    for w in layers:
        x = torch.tanh(x @ w)
    return x


def make_model(torch, gib):
    """The weights, --gib GiB in layers of 256 MiB, made on the device from
    a fixed seed, and the fixed input."""
    n = max(1, round(gib * (1 << 30) / (WIDTH * WIDTH * 4)))
    g = torch.Generator(device="cuda").manual_seed(46)
    layers = [torch.empty(WIDTH, WIDTH, device="cuda").normal_(0, WIDTH ** -0.5, generator=g) for _ in range(n)]
    return layers


def bandwidth(torch, gib):
    """The host link's copy bandwidth, device to host and back, from and to
    page-locked memory, in bytes a second: the best of five copies of gib
    GiB each way."""
    n = int(gib * (1 << 30))
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    out = {}
    for name, dst, src in (("dtoh", host, dev), ("htod", dev, host)):
        best = None
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            s = time.perf_counter() - t0
            best = s if best is None else min(best, s)
        out[name] = n / best
    del dev, host
    return out


class Raw:
    """Device memory from an allocator that is not gpuscope's: CuPy's
    cudaMalloc (cupy.cuda.Memory, not its pool), else cudaMalloc through
    ctypes."""

    def __init__(self):
        self.by, self.rt, self.cupy = None, None, None
        try:
            import cupy
            self.cupy, self.by = cupy, "cupy"
            return
        except ImportError:
            pass
        for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
            try:
                self.rt, self.by = ctypes.CDLL(name), "cudart"
                return
            except OSError:
                continue
        raise RuntimeError("no CuPy and no libcudart.so to allocate beside gpuscope with")

    def alloc(self, nbytes, fill=0x5A):
        """nbytes of device memory, filled with fill; raises where the
        device has no room."""
        if self.cupy is not None:
            m = self.cupy.cuda.Memory(nbytes)
            self.cupy.cuda.runtime.memset(m.ptr, fill, nbytes)
            self.cupy.cuda.runtime.deviceSynchronize()
            return m
        p = ctypes.c_void_p()
        if self.rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(nbytes)) != 0:
            raise MemoryError(f"cudaMalloc of {nbytes} bytes failed")
        self.rt.cudaMemset(p, fill, ctypes.c_size_t(nbytes))
        self.rt.cudaDeviceSynchronize()
        return p

    def free(self, m):
        if self.cupy is None:
            self.rt.cudaFree(m)


def figures(torch, gpuscope):
    """The driver's free memory and gpuscope's counters, now."""
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    st = gpuscope.stats()
    keys = ("reserved", "allocated", "sleeping", "sleeping_released", "sleeping_kept", "pinned_allocated",
            "pinned_cached", "sleeps", "wakes")
    return dict({"driver_free": free, "driver_total": total}, **{k: st.get(k) for k in keys})


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    fn(*args, **kw)
    return time.perf_counter() - t0


def run_gpuscope(args):
    import gpuscope
    gpuscope.use_torch()
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    emit(event="machine", gpu=torch.cuda.get_device_name(0), torch=torch.__version__, shim=gpuscope.torch_shim())
    if not args.small:
        emit(event="bandwidth", **bandwidth(torch, 2))
    if args.cap_gib:
        # Under a cap of 2.5-32 GiB the scope's pool grows in pages, as the
        # device's does: sleep and wake release and map each one.
        gpuscope.set_max_reserved(int(args.cap_gib * 2**30))
        emit(event="cap", cap_bytes=int(args.cap_gib * 2**30))
    with gpuscope.scope("weights", sleepable=True):
        layers = make_model(torch, args.gib)
    x = torch.empty(BATCH, WIDTH, device="cuda").uniform_(-1, 1, generator=torch.Generator(device="cuda").manual_seed(7))
    ref = forward(torch, layers, x)
    ptrs = [w.data_ptr() for w in layers]
    nbytes = sum(w.numel() * w.element_size() for w in layers)
    emit(event="model", weights_bytes=nbytes, layers=len(layers))

    # Ballast from another allocator fills the device but 1 GiB: what the
    # borrow below takes can only be what the scope gave back.
    raw = Raw()
    gpuscope.empty_cache()
    free = figures(torch, gpuscope)["driver_free"]
    ballast = raw.alloc(max(free - (1 << 30), 0) // (2 << 20) * (2 << 20), fill=0)
    before = figures(torch, gpuscope)
    seconds = timed(gpuscope.sleep, "weights", keep=True)
    after = figures(torch, gpuscope)
    emit(event="sleep", cycle=0, seconds=seconds, before=before, after=after)
    want = int(after["sleeping_released"] * 0.95) // (2 << 20) * (2 << 20)
    m = raw.alloc(want)
    emit(event="borrow", bytes=want, by=raw.by, driver_free_before_sleep=before["driver_free"],
         driver_free_while_borrowed=figures(torch, gpuscope)["driver_free"])
    raw.free(m)
    del m
    seconds = timed(gpuscope.wake, "weights")
    emit(event="wake", cycle=0, seconds=seconds, after=figures(torch, gpuscope))
    out = forward(torch, layers, x)
    emit(event="check", cycle=0, same_ptrs=[w.data_ptr() for w in layers] == ptrs, same_output=bool(torch.equal(out, ref)))
    del out

    for c in range(1, args.cycles + 1):
        s = timed(gpuscope.sleep, "weights", keep=True)
        asleep = figures(torch, gpuscope)
        w = timed(gpuscope.wake, "weights")
        emit(event="cycle", cycle=c, sleep_seconds=s, wake_seconds=w, asleep=asleep, awake=figures(torch, gpuscope))
    out = forward(torch, layers, x)
    emit(event="check", cycle=args.cycles, same_ptrs=[w.data_ptr() for w in layers] == ptrs, same_output=bool(torch.equal(out, ref)))
    del out

    raw.free(ballast)
    del ballast
    # A KV cache put to sleep without its contents wakes as zeros, at the
    # same address.
    with gpuscope.scope("kv", sleepable=True):
        kv = torch.full(((1 << 30) // 4,), 3.0, device="cuda")
    at = kv.data_ptr()
    s = timed(gpuscope.sleep, "kv", keep=False)
    w = timed(gpuscope.wake, "kv")
    emit(event="discard", sleep_seconds=s, wake_seconds=w, bytes=kv.numel() * 4, same_ptr=kv.data_ptr() == at,
         zeros=all(float(v) == 0 for v in torch.aminmax(kv)))  # count_nonzero copies kv: a bool, then an int64
    del kv
    free_asleep(torch, gpuscope)
    del layers, ref, x
    torch.cuda.synchronize()
    emit(event="done", stats=figures(torch, gpuscope))


def free_asleep(torch, gpuscope):
    """A tensor freed while its scope sleeps (the garbage collector, a
    framework dropping a KV cache) is freed, with no failure: what sleeps
    goes down by its bytes, and what Wake takes again by the pages it held
    alone; the other tensor wakes at its address with its bytes, and the
    scope, empty, ends."""
    with gpuscope.scope("pair", sleepable=True):
        kept = torch.full(((256 << 20) // 4,), 5.0, device="cuda")
        dropped = torch.full(((256 << 20) // 4,), 7.0, device="cuda")
    at, freed = kept.data_ptr(), dropped.numel() * 4
    gpuscope.sleep("pair", keep=True)
    before = gpuscope.stats()
    del dropped
    after = gpuscope.stats()
    gpuscope.wake("pair")
    emit(event="free_asleep", bytes=freed, sleeping_drop=before["sleeping"] - after["sleeping"],
         released_drop=before["sleeping_released"] - after["sleeping_released"],
         failures=after["c_failures"] - before["c_failures"], same_ptr=kept.data_ptr() == at,
         kept=all(float(v) == 5.0 for v in torch.aminmax(kept)))
    del kept
    gpuscope.end("pair")


def run_tms(args):
    try:
        from torch_memory_saver import torch_memory_saver as tms
    except ImportError as e:
        emit(event="tms", not_run=f"torch_memory_saver is not installed: {e}")
        return
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    if hasattr(tms, "hook_mode"):
        tms.hook_mode = "torch"
    with tms.region(enable_cpu_backup=True):
        layers = make_model(torch, args.gib)
    x = torch.empty(BATCH, WIDTH, device="cuda").uniform_(-1, 1, generator=torch.Generator(device="cuda").manual_seed(7))
    ref = forward(torch, layers, x)
    sleeps, wakes = [], []
    for _ in range(args.cycles + 1):
        torch.cuda.synchronize()
        sleeps.append(timed(tms.pause))
        torch.cuda.synchronize()
        wakes.append(timed(tms.resume))
    out = forward(torch, layers, x)
    emit(event="tms", sleep_seconds=sleeps, wake_seconds=wakes, weights_bytes=sum(w.numel() * 4 for w in layers),
         same_output=bool(torch.equal(out, ref)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["gpuscope", "tms"])
    ap.add_argument("--gib", type=float, default=10.0)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--cap-gib", type=float, default=0.0, help="the device's cap (gpuscope.set_max_reserved); 0: none")
    ap.add_argument("--small", action="store_true", help="0.5 GiB and 2 cycles, no bandwidth: for compute-sanitizer")
    args = ap.parse_args()
    if args.small:
        args.gib, args.cycles = 0.5, 2
    try:
        (run_gpuscope if args.mode == "gpuscope" else run_tms)(args)
    except Exception as e:  # noqa: BLE001 - the report says what failed
        emit(event="error", mode=args.mode, error=f"{type(e).__name__}: {e}")
        raise


if __name__ == "__main__":
    sys.exit(main())
