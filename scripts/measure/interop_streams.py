"""Checks that PyTorch's record_stream reaches gpuscope, for docs/interop.md:
a tensor that work queued on another stream will still write is recorded
there and deleted; tensors of its size allocated and zeroed at once on its
own stream must not share its memory, or the other stream's late write
lands in them. Prints one JSON line.

    GPUSCOPE_LIB=libgpuscope.so python3 interop_streams.py wired [--onto side|default]   # use_torch()
    GPUSCOPE_LIB=libgpuscope.so python3 interop_streams.py unwired [--onto ...]          # use_torch(shim=False)

--onto side (the default): the tensor is the default stream's and a side
stream writes late. --onto default: the tensor is a side stream's and the
default stream writes late (FSDP's pattern), which gpuscope once dropped,
reading stream 0 as the tensor's own. unwired is the control: there
record_stream does nothing, the memory can be reused at once, and the
write can land in a new tensor, which shows that the check can fail.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "python"))

import gpuscope  # noqa: E402
import torch  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["wired", "unwired"])
ap.add_argument("--onto", choices=["side", "default"], default="side")
a = ap.parse_args()
gpuscope.use_torch(shim=a.mode == "wired")
n = 64 << 20
side = torch.cuda.Stream()
default = torch.cuda.default_stream()
# own: the tensor's stream, where the new tensors are allocated and zeroed;
# late: the stream that writes it late and that record_stream names.
own, late = (default, side) if a.onto == "side" else (side, default)


def warm(stream):
    """Runs every kernel the check uses once on stream, on a small tensor,
    so that no first launch (a module loaded lazily) delays the measured
    part: the own stream's zeroing must run while the late stream still
    sleeps."""
    with torch.cuda.stream(stream):
        w = torch.empty(4096, dtype=torch.uint8, device="cuda")
        torch.cuda._sleep(1000)
        w.fill_(1)
        w.zero_()
        int(w.max())
        del w


warm(default)
warm(side)
torch.cuda.synchronize()

with torch.cuda.stream(own):
    x = torch.zeros(n, dtype=torch.uint8, device="cuda")
old = x.data_ptr()
torch.cuda.synchronize()
with torch.cuda.stream(late):
    torch.cuda._sleep(1 << 32)  # about 2 s of the late stream (2**32 cycles at about 2 GHz)
    x.fill_(1)  # the late write
x.record_stream(late)
del x
busy_after_del = not late.query()
t = time.perf_counter()
with torch.cuda.stream(own):
    ys = [torch.empty(n, dtype=torch.uint8, device="cuda") for _ in range(4)]
    for y in ys:
        y.zero_()
alloc_ms = 1e3 * (time.perf_counter() - t)
busy = not late.query()
torch.cuda.synchronize()
print(json.dumps({
    "mode": a.mode,
    "onto": a.onto,
    "shim": gpuscope.torch_shim(),
    "record_stream_calls": gpuscope.torch_shim().get("record_stream", 0),
    "late_stream_busy_after_the_del": busy_after_del,
    "late_stream_busy_after_the_allocations": busy,
    "allocations_ms": alloc_ms,
    "a_new_tensor_took_its_address": any(y.data_ptr() == old for y in ys),
    "late_write_landed_in_a_new_tensor": any(int(y.max()) != 0 for y in ys),
    "c_failures": gpuscope.stats()["c_failures"],
}))
