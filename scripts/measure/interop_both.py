"""PyTorch and CuPy in one process on one gpuscope pool under one cap, each
in a scope of its own, for docs/interop.md: a short training and matrix
products and an FFT, then CuPy allocates chunks until the pool refuses one
at the cap, so that the cap binds; prints the Summary there and the
device's stats, then what an allocation past the cap does in each
framework (issue 43: each framework's own OutOfMemoryError, with
gpuscope's message), and that the process goes on: allocations under the
cap succeed in both after, and a training step runs. JSON lines, each
printed as soon as it is known, so that a process that dies leaves what
came before.

    GPUSCOPE_LIB=libgpuscope.so python3 interop_both.py [CAP_BYTES]

The cap (default 2 GiB) leaves the workload room (its peak was 0.96 GB on
an H200); the chunks past the cap are never touched.
"""
import json
import math
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


def past_cap(alloc, oom):
    """What an allocation the pool should refuse gave: "null pointer",
    the error's class and first line, or "allocated (the cap did not
    hold)"; whether the error is the framework's own out-of-memory error
    (oom); its whole message with its notes; and the array, to keep or
    drop."""
    try:
        x = alloc()
    except Exception as e:  # noqa: BLE001 - which error the framework raises is what is reported
        text = "\n".join([str(e)] + list(getattr(e, "__notes__", [])))
        return f"{type(e).__module__}.{type(e).__qualname__}: " + str(e).splitlines()[0], isinstance(e, oom), text, None
    ptr = x.data.ptr if isinstance(x, cupy.ndarray) else x.data_ptr()
    return ("null pointer" if ptr == 0 else "allocated (the cap did not hold)"), False, "", x


def emit(d):
    print(json.dumps(d), flush=True)


def step(model, opt):
    loss = model(torch.randn(256, 2048, device="cuda")).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss)


torch.manual_seed(0)
report = {"cap": cap, "chunk": chunk, "shim": gpuscope.torch_shim()}
with gpuscope.scope("torch"):
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(5):
        step(model, opt)
    with gpuscope.scope("cupy"):
        a = cupy.random.standard_normal((4096, 4096), dtype=cupy.float32)
        b = cupy.fft.fft(a.astype(cupy.complex64))
        c = a @ a
        cupy.cuda.Device().synchronize()
        torch.cuda.synchronize()
        # Up to the cap: chunks until the pool refuses one, which is the
        # allocation past the cap of CuPy's.
        held, past, own, text = [], None, False, ""
        for _ in range(cap // chunk + 2):
            past, own, text, x = past_cap(lambda: cupy.empty(chunk, dtype=cupy.uint8), cupy.cuda.memory.OutOfMemoryError)
            if x is None:
                break
            held.append(x)
        report.update(filled=len(held), cupy_past_cap=past, cupy_oom_is_cupys=own, cupy_message_names_the_cap="cap" in text)
        summary = gpuscope.summary()
        print(summary)
        st = gpuscope.stats()
        report.update(reserved=st["reserved"], peak_reserved=st["peak_reserved"], allocated=st["allocated"],
                      c_failures=st["c_failures"], c_pair_hits=st.get("c_pair_hits"))
        report["both_named"] = all(re.search(rf"(?m)^ +{n} ", summary) for n in ("torch", "cupy"))
        report["under_cap"] = report["peak_reserved"] <= cap
        emit(report)
        # PyTorch's allocation past the cap, while the pool is still full.
        past, own, text, t = past_cap(lambda: torch.empty(chunk, dtype=torch.uint8, device="cuda"), torch.cuda.OutOfMemoryError)
        if past == "null pointer":
            past = "null pointer: PyTorch made a tensor of address 0"
        emit({"torch_past_cap": past, "torch_oom_is_torchs": own, "torch_message_names_the_cap": "cap" in text,
              "torch_message": text[:2000]})
        # The process goes on: under the cap, each framework allocates again.
        del held, t
        x = cupy.ones(chunk, dtype=cupy.uint8)
        y = torch.ones(chunk, dtype=torch.uint8, device="cuda")
        # Every byte 1, read with no copy: PyTorch's sum() of uint8 makes an
        # int64 copy, 8x the chunk, which the cap refuses.
        after = {"cupy_after": int(x.min()) == 1 == int(x.max()), "torch_after": int(y.min()) == 1 == int(y.max())}
        del x, y, a, b, c
    after["step_after"] = math.isfinite(step(model, opt))  # a training step ran after the refusals
    after["went_on"] = after["cupy_after"] and after["torch_after"] and after["step_after"]
    emit(after)
    del model, opt
