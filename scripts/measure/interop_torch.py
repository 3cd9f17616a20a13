"""Trains a transformer on sequences of varying length through one of three
CUDA allocators, for docs/interop.md, and prints one JSON line: the loss of
every step (float.hex, to compare bit for bit), the time of the timed steps
(their mean, step_ms, and each one's), the peak memory the allocator
reserved and, for gpuscope, its counters (gpuscope_stats).

    python3 interop_torch.py native      # PyTorch's caching allocator
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 interop_torch.py expandable
    GPUSCOPE_LIB=libgpuscope.so python3 interop_torch.py gpuscope

Every mode runs the same computation: weights made on the host from one
seed, the same batches, deterministic algorithms (CUBLAS_WORKSPACE_CONFIG
is set here, before CUDA starts). --small makes the short version that
compute-sanitizer runs.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# The counters of gpuscope_stats a gpuscope run prints.
STATS = ("c_pair_hits", "c_pair_allocs", "c_pair_late", "c_failures", "allocs", "frees", "served_from_cache",
         "source_allocs", "ooms")


class Block(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        # Attention written out (matrix products, a mask, softmax): each of
        # its kernels is deterministic, whatever SDPA backend a build has.
        att = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Model(nn.Module):
    def __init__(self, vocab, d, heads, ff, layers, ctx):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["native", "expandable", "gpuscope"])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10, help="steps before the clock starts")
    ap.add_argument("--small", action="store_true", help="the short version, for compute-sanitizer")
    ap.add_argument("--round", type=int, default=0, help="the harness's round, echoed in the output")
    a = ap.parse_args()
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if (a.mode == "expandable") != ("expandable_segments:True" in conf):
        sys.exit(f"interop_torch: mode {a.mode} with PYTORCH_CUDA_ALLOC_CONF={conf!r}")

    gs = None
    if a.mode == "gpuscope":
        import gpuscope as gs

        gs.use_torch()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if a.small:
        vocab, d, heads, ff, layers, batch, lengths = 512, 128, 4, 512, 2, 4, (32, 128)
    else:
        vocab, d, heads, ff, layers, batch, lengths = 16384, 1024, 16, 4096, 12, 8, (128, 1536)
    g = torch.Generator().manual_seed(1)
    # Lengths in multiples of 8, drawn once: every mode sees the same.
    seq = [8 * int(x) for x in torch.randint(lengths[0] // 8, lengths[1] // 8 + 1, (a.steps,), generator=g)]
    data = [torch.randint(0, vocab, (batch, t + 1), generator=g) for t in seq]

    def train():
        model = Model(vocab, d, heads, ff, layers, lengths[1]).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        losses, steps, start = [], [], None
        for i, x in enumerate(data):
            if i == a.warmup:
                torch.cuda.synchronize()
                start = last = time.perf_counter()
            x = x.cuda(non_blocking=False)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), x[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())  # waits for the step's work: each step is timed whole
            if start is not None:
                now = time.perf_counter()
                steps.append(now - last)
                last = now
        torch.cuda.synchronize()
        return losses, steps, time.perf_counter() - start

    if gs is not None:
        # Bound to the default stream: the backward passes, which run on
        # autograd's thread, allocate in the scope too.
        with gs.scope("torch-train", stream=torch.cuda.current_stream()):
            losses, steps, secs = train()
        st = gs.stats()
        peak_reserved, peak_allocated = st["peak_reserved"], st["peak_allocated"]
        # Who served the allocations: the pair cache (c_pair_hits, never
        # in Go), the pool's cache, the driver.
        stats = {k: st.get(k) for k in STATS}
    else:
        losses, steps, secs = train()
        peak_reserved, peak_allocated = torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()
        stats = None
    timed = a.steps - a.warmup
    out = {
        "mode": a.mode,
        "round": a.round,
        "steps": a.steps,
        "timed_steps": timed,
        "tokens": sum(seq) * batch,
        "step_ms": 1e3 * secs / timed,
        "step_ms_each": [round(1e3 * t, 3) for t in steps],
        "peak_reserved": peak_reserved,
        "peak_allocated": peak_allocated,
        "final_loss": losses[-1],
        "losses": [float(x).hex() for x in losses],
    }
    if stats is not None:
        out["gpuscope_stats"] = stats
    print(json.dumps(out))


if __name__ == "__main__":
    main()
