"""PyTorch and CuPy in one process on one gpuscope pool under one cap, each
in a scope of its own, for docs/interop.md: a short training and matrix
products and an FFT, then CuPy allocates chunks until the pool refuses one
at the cap, so that the cap binds; prints the Summary there, the device's
stats, and what an allocation past the cap then does in each framework.

    GPUSCOPE_LIB=libgpuscope.so python3 interop_both.py [CAP_BYTES]

The cap (default 2 GiB) leaves the workload room (its peak was 0.96 GB on
an H200): neither framework checks a custom allocator's NULL, so an
allocation refused inside the workload would make an array at address 0
that a kernel then reads. The chunks past the cap are never touched.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "python"))

import gpuscope  # noqa: E402

gpuscope.use_torch()
gpuscope.use_cupy()
cap = int(sys.argv[1]) if len(sys.argv) > 1 else 2 << 30
chunk = 128 << 20
gpuscope.set_max_reserved(cap)

import cupy  # noqa: E402
import torch  # noqa: E402


def past_cap(alloc):
    """What an allocation the pool should refuse gave: "null pointer",
    the error's name and first line, or "allocated (the cap did not
    hold)"; and the array, to keep or drop."""
    try:
        x = alloc()
    except Exception as e:  # noqa: BLE001 - which error the framework raises is what is reported
        return type(e).__name__ + ": " + str(e).splitlines()[0], None
    ptr = x.data.ptr if isinstance(x, cupy.ndarray) else x.data_ptr()
    return ("null pointer" if ptr == 0 else "allocated (the cap did not hold)"), x


torch.manual_seed(0)
report = {"cap": cap, "chunk": chunk}
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
        # Up to the cap: chunks until the pool refuses one, which is the
        # allocation past the cap of CuPy's.
        held, past = [], None
        for _ in range(cap // chunk + 2):
            past, x = past_cap(lambda: cupy.empty(chunk, dtype=cupy.uint8))
            if past != "allocated (the cap did not hold)":
                break
            held.append(x)
        report["filled"] = len(held)
        report["cupy_past_cap"] = past
        summary = gpuscope.summary()
        print(summary)
        st = gpuscope.stats()
        report.update(reserved=st["reserved"], peak_reserved=st["peak_reserved"], allocated=st["allocated"],
                      c_failures=st["c_failures"], c_pair_hits=st.get("c_pair_hits"))
        report["both_named"] = all(re.search(rf"(?m)^ +{n} ", summary) for n in ("torch", "cupy"))
        report["under_cap"] = report["peak_reserved"] <= cap
        print(json.dumps(report), flush=True)
        # PyTorch's allocation past the cap, while the pool is still full,
        # after the first line is out: its pluggable wrapper does not check
        # the NULL (CUDAPluggableAllocator::malloc), and the process may not
        # come back from it.
        past, t = past_cap(lambda: torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        if past == "null pointer":
            past = "null pointer: PyTorch made a tensor of address 0"
        print(json.dumps({"torch_past_cap": past}), flush=True)
        del a, b, c, held, t
    del model, opt, loss
