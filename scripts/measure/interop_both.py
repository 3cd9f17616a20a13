"""PyTorch and CuPy in one process on one gpuscope pool under one cap, each
in a scope of its own, for docs/interop.md: prints the Summary while both
hold memory, the device's stats, and what an allocation past the cap does
in each framework.

    GPUSCOPE_LIB=libgpuscope.so python3 interop_both.py [CAP_BYTES]
"""
import json
import re
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "python"))

import gpuscope  # noqa: E402

gpuscope.use_torch()
gpuscope.use_cupy()
cap = int(sys.argv[1]) if len(sys.argv) > 1 else 8 << 30
gpuscope.set_max_reserved(cap)

import cupy  # noqa: E402
import torch  # noqa: E402

torch.manual_seed(0)
report = {"cap": cap}
with gpuscope.scope("torch"):
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(5):
        loss = model(torch.randn(256, 2048, device="cuda")).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with gpuscope.scope("cupy"):
        a = cupy.random.standard_normal((4096, 4096), dtype=cupy.float32)
        b = cupy.fft.fft(a.astype(cupy.complex64))
        c = a @ a
        cupy.cuda.Device().synchronize()
        torch.cuda.synchronize()
        summary = gpuscope.summary()
        print(summary)
        st = gpuscope.stats()
        report.update(reserved=st["reserved"], peak_reserved=st["peak_reserved"], allocated=st["allocated"])
        # One allocation past the cap, from each framework.
        try:
            x = cupy.empty(cap, dtype=cupy.uint8)
            report["cupy_past_cap"] = "null pointer" if x.data.ptr == 0 else "allocated (the cap did not hold)"
        except Exception as e:  # noqa: BLE001 - which error CuPy raises is what is reported
            report["cupy_past_cap"] = type(e).__name__ + ": " + str(e).splitlines()[0]
        del a, b, c
    del model, opt, loss
report["both_named"] = all(re.search(rf"(?m)^ +{n} ", summary) for n in ("torch", "cupy"))
report["under_cap"] = report["peak_reserved"] <= cap
print(json.dumps(report), flush=True)
# Last, as it may not come back: PyTorch's pluggable wrapper does not check
# the allocator's NULL (CUDAPluggableAllocator::malloc).
try:
    t = torch.empty(cap, dtype=torch.uint8, device="cuda")
    past = "null pointer: PyTorch made a tensor of address 0" if t.data_ptr() == 0 else "allocated (the cap did not hold)"
except (torch.OutOfMemoryError, RuntimeError) as e:
    past = type(e).__name__ + ": " + str(e).splitlines()[0]
print(json.dumps({"torch_past_cap": past}), flush=True)
