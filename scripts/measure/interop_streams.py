"""Checks that PyTorch's record_stream reaches gpuscope, for docs/interop.md:
a tensor used on a side stream, recorded there and deleted while that
stream's work still runs, must not give its memory to the next tensor of
its size. Prints one JSON line.

    GPUSCOPE_LIB=libgpuscope.so python3 interop_streams.py wired     # use_torch(streams=True)
    GPUSCOPE_LIB=libgpuscope.so python3 interop_streams.py unwired   # use_torch(): record_stream is dropped

unwired is the control: there the memory is reused at once, which shows
that the check can fail.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "python"))

import gpuscope  # noqa: E402
import torch  # noqa: E402

wired = sys.argv[1] == "wired"
gpuscope.use_torch(streams=wired)
n = 64 << 20
side = torch.cuda.Stream()
x = torch.empty(n, dtype=torch.uint8, device="cuda")
x.zero_()
ptr = x.data_ptr()
torch.cuda.synchronize()
with torch.cuda.stream(side):
    torch.cuda._sleep(1 << 30)  # about half a second of the side stream
    x.add_(1)
x.record_stream(side)
del x
y = torch.empty(n, dtype=torch.uint8, device="cuda")
reused_early = y.data_ptr() == ptr
busy = not side.query()
calls = gpuscope._streams.gpuscope_torch_record_stream_calls() if gpuscope._streams else 0
side.synchronize()
del y
print(json.dumps({"mode": sys.argv[1], "record_stream_calls": calls, "side_stream_busy_at_reuse": busy,
                  "reused_while_side_busy": reused_early and busy, "c_failures": gpuscope.stats()["c_failures"]}))
