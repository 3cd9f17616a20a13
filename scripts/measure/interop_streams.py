"""Checks that PyTorch's record_stream reaches gpuscope, for docs/interop.md:
a tensor that work queued on a side stream will still write is recorded
there and deleted; tensors of its size allocated and zeroed at once on the
default stream must not share its memory, or the side stream's late write
lands in them. Prints one JSON line.

    GPUSCOPE_LIB=libgpuscope.so python3 interop_streams.py wired     # use_torch(streams=True)
    GPUSCOPE_LIB=libgpuscope.so python3 interop_streams.py unwired   # use_torch(): record_stream is dropped

unwired is the control: there the memory can be reused at once, and the
write can land in a new tensor, which shows that the check can fail.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "python"))

import gpuscope  # noqa: E402
import torch  # noqa: E402

wired = sys.argv[1] == "wired"
gpuscope.use_torch(streams=wired)
n = 64 << 20
side = torch.cuda.Stream()


def warm(stream):
    """Runs every kernel the check uses once on stream, on a small tensor,
    so that no first launch (a module loaded lazily) delays the measured
    part: the default stream's zeroing must run while the side stream
    still sleeps."""
    with torch.cuda.stream(stream):
        w = torch.empty(4096, dtype=torch.uint8, device="cuda")
        torch.cuda._sleep(1000)
        w.fill_(1)
        w.zero_()
        int(w.max())
        del w


warm(torch.cuda.current_stream())
warm(side)
torch.cuda.synchronize()

x = torch.zeros(n, dtype=torch.uint8, device="cuda")
old = x.data_ptr()
torch.cuda.synchronize()
with torch.cuda.stream(side):
    torch.cuda._sleep(1 << 33)  # about 4 s of the side stream (2**33 cycles at about 2 GHz)
    x.fill_(1)  # the late write
x.record_stream(side)
del x
busy_after_del = not side.query()
t = time.perf_counter()
ys = [torch.empty(n, dtype=torch.uint8, device="cuda") for _ in range(4)]
for y in ys:
    y.zero_()
alloc_ms = 1e3 * (time.perf_counter() - t)
busy = not side.query()
torch.cuda.synchronize()
print(json.dumps({
    "mode": sys.argv[1],
    "record_stream_calls": gpuscope._streams.gpuscope_torch_record_stream_calls() if gpuscope._streams else 0,
    "side_stream_busy_after_the_del": busy_after_del,
    "side_stream_busy_after_the_allocations": busy,
    "allocations_ms": alloc_ms,
    "a_new_tensor_took_its_address": any(y.data_ptr() == old for y in ys),
    "late_write_landed_in_a_new_tensor": any(int(y.max()) != 0 for y in ys),
    "c_failures": gpuscope.stats()["c_failures"],
}))
