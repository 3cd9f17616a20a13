"""Checks that PyTorch's allocator calls reach gpuscope through use_torch's
shim, for docs/interop.md (issue 43): torch.cuda.empty_cache() gives
gpuscope's cached memory back, torch.cuda.set_per_process_memory_fraction
caps gpuscope's pool (an allocation past the fraction raises
torch.cuda.OutOfMemoryError, one under it succeeds), and CUDA graph
capture, which gpuscope cannot serve, is refused with why instead of
capturing into memory that others get. Prints one JSON line.

    GPUSCOPE_LIB=libgpuscope.so python3 interop_hooks.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "python"))

import gpuscope  # noqa: E402
import torch  # noqa: E402

gpuscope.use_torch()
out = {"shim": gpuscope.torch_shim()}

# empty_cache: a GiB freed stays in gpuscope's pool until empty_cache.
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
del x
before = gpuscope.stats()["reserved"]
torch.cuda.empty_cache()
after = gpuscope.stats()["reserved"]
out["empty_cache"] = {"reserved_before": before, "reserved_after": after, "acted": after < before}

# The memory fraction: gpuscope's cap, a fraction of the device's memory.
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(0.1, 0)
f = {"total": total, "fraction": 0.1}
try:
    torch.empty(total // 5, dtype=torch.uint8, device="cuda")
    f["past"] = "allocated (the fraction did not hold)"
except torch.cuda.OutOfMemoryError as e:
    f["past"] = "torch.cuda.OutOfMemoryError: " + str(e).splitlines()[0]
    f["past_refused"] = True
y = torch.ones(total // 20, dtype=torch.uint8, device="cuda")
# Every byte 1, read with no copy of y: sum() of uint8 makes an int64 copy,
# 8x its size, which the fraction refuses.
f["under_allowed"] = int(y.min()) == 1 == int(y.max())
del y
torch.cuda.set_per_process_memory_fraction(1.0, 0)
f["acted"] = bool(f.get("past_refused")) and f["under_allowed"]
out["memory_fraction"] = f

# Graph capture: refused by the shim's hook, with why; last, since a
# capture that fails to begin leaves its stream current.
g = {"refused": False}
try:
    graph = torch.cuda.CUDAGraph()
    a = torch.ones(1024, device="cuda")
    with torch.cuda.graph(graph):
        b = a * 2
    g["message"] = "captured (nothing refused it)"
except RuntimeError as e:
    g["refused"] = "gpuscope" in str(e)
    g["message"] = str(e).splitlines()[0][:300]
out["graph_capture"] = g
out["c_failures"] = gpuscope.stats()["c_failures"]
print(json.dumps(out))
