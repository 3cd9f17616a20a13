"""A server of four threads on gpuscope, for docs/interop.md (issue 43):
each thread handles requests, training steps and inferences in turn, each
request in a scope of its own bound to the thread's stream, so that what a
framework's helper thread allocates for that stream (PyTorch's autograd
thread, which runs every backward pass) lands in it too. Each round, the
four requests are open at once, two of each kind: each reads its scope's
bytes, which must be exactly what it holds (so nothing is charged across),
and thread 0 reads the Summary, which must name the four. Then each ends
its scope, which must succeed with nothing left live. Prints one JSON line.

    GPUSCOPE_LIB=libgpuscope.so python3 interop_server.py torch   # a GPU, PyTorch through use_torch()
    GPUSCOPE_LIB=libgpuscope.so python3 interop_server.py host    # the host device: ctypes allocations
                                                                  # through gpuscope_alloc, a thread of
                                                                  # its own standing in for autograd's
"""
import argparse
import gc
import json
import os
import queue
import re
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmd", "libgpuscope", "python"))

import gpuscope  # noqa: E402

THREADS = 4
ROUND = 512  # gpuscope's pool charges an allocation rounded up to 512 bytes


def rounded(n):
    return (n + ROUND - 1) // ROUND * ROUND


class HostBackend:
    """Requests made of ctypes allocations on the host device: a training
    step keeps its weights, gradients and output, the gradients allocated
    by a thread with no scope (autograd's stand-in) for the request's
    stream; an inference keeps its input and output, the input on the
    default stream."""

    def __init__(self):
        self.lib = gpuscope.load()
        self.jobs = queue.Queue()
        self.autograd = threading.Thread(target=self._autograd, daemon=True)
        self.autograd.start()

    def _autograd(self):
        while True:
            job = self.jobs.get()
            if job is None:
                return
            stream, sizes, done = job
            done.put([self.lib.gpuscope_alloc(n, 0, stream) for n in sizes])

    def stream(self, t):
        return 0x10000 * (t + 1)  # a library's stream handle

    def warm(self, t, stream):
        pass

    def request(self, kind, t, r, stream):
        """Makes the request's allocations; returns what it holds and the
        bytes it expects its scope to hold."""
        held, k = [], 1 + (t + r) % 3
        if kind == "train":
            for n in (k * 65536 + 1000, 3 * 65536, 777):  # weights and the output, this thread, its stream
                held.append((self.lib.gpuscope_alloc(n, 0, stream), n, stream))
            act = self.lib.gpuscope_alloc(1 << 20, 0, stream)  # an activation, freed by the backward pass
            done = queue.Queue()
            sizes = [k * 65536 + 1000, 3 * 65536]
            self.jobs.put((stream, sizes, done))
            held += [(p, n, stream) for p, n in zip(done.get(), sizes)]  # gradients, on autograd's thread
            self.lib.gpuscope_free(act, 1 << 20, 0, stream)
        else:
            held.append((self.lib.gpuscope_alloc(k * 4096 + 100, 0, None), k * 4096 + 100, None))  # the input
            held.append((self.lib.gpuscope_alloc(k * 8192, 0, stream), k * 8192, stream))  # the output
        if any(p is None for p, _, _ in held):
            raise gpuscope.GpuscopeError(f"an allocation failed: {gpuscope._last_error()[0]}")
        return held, sum(rounded(n) for _, n, _ in held)

    def release(self, held, stream):
        for p, n, s in held:
            self.lib.gpuscope_free(p, n, 0, s)

    def close(self):
        self.jobs.put(None)
        self.autograd.join()


class TorchBackend:
    """Requests in PyTorch on a GPU: a training step of a model of the
    request's own (weights, gradients, AdamW's state, the batch and the
    loss kept), an inference of the model the server loaded (the input
    and the output kept), each on the thread's stream."""

    def __init__(self):
        import torch

        gpuscope.use_torch()
        if not gpuscope.torch_shim()["wired"]:
            raise gpuscope.GpuscopeError(f"the PyTorch shim is not wired: {gpuscope.torch_shim()['why']}")
        self.torch = torch
        torch.manual_seed(0)
        self.model = self._model().eval()  # the server's, in the root scope
        self.streams = [torch.cuda.Stream() for _ in range(THREADS)]
        torch.cuda.synchronize()  # the weights are written before other streams read them

    def _model(self):
        nn = self.torch.nn
        return nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 1024)).cuda()

    def stream(self, t):
        return self.streams[t]

    def warm(self, t, stream):
        """Runs a request of each kind on the thread and its stream outside
        any request: cuBLAS's workspaces, which PyTorch keeps per handle
        (per thread, autograd's too) and stream for the process's life, are
        made here, not in a request."""
        for kind in ("train", "infer"):
            held, _ = self.request(kind, t, 0, stream)
            self.release(held, stream)

    def request(self, kind, t, r, stream):
        torch = self.torch
        with torch.cuda.stream(stream):
            x = torch.randn(64 + 32 * ((t + r) % 3), 1024, device="cuda")
            if kind == "train":
                m = self._model()
                opt = torch.optim.AdamW(m.parameters())
                loss = m(x).square().mean()
                loss.backward()
                opt.step()
                tensors = [x, loss] + [p for p in m.parameters()] + [p.grad for p in m.parameters()]
                tensors += [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v) and v.is_cuda]
                held = [m, opt, x, loss]
            else:
                with torch.no_grad():
                    y = self.model(x)
                tensors, held = [x, y], [x, y]
            stream.synchronize()
        storages = {}
        for v in tensors:
            storages[v.untyped_storage().data_ptr()] = v.untyped_storage().nbytes()
        return held, sum(rounded(n) for n in storages.values())

    def release(self, held, stream):
        held.clear()
        gc.collect()  # what a cycle of the model's or the optimizer's keeps, before the scope ends
        stream.synchronize()

    def close(self):
        self.torch.cuda.synchronize()


def serve(backend, rounds):
    """Runs rounds rounds of four requests, one a thread; returns what
    each request found, what thread 0 saw in the Summaries, the failures,
    and the device's stats before the first request."""
    barrier = threading.Barrier(THREADS)
    results, summaries, errors, before = [], [], [], []
    lock = threading.Lock()

    def worker(t):
        stream = backend.stream(t)
        try:
            backend.warm(t, stream)
            barrier.wait()
            if t == 0:
                before.append(gpuscope.stats())  # after the warm-up, which leaves cuBLAS's workspaces
            barrier.wait()
            for r in range(rounds):
                kind = "train" if (t + r) % 2 == 0 else "infer"
                name = f"req-{t}-{r}"
                with gpuscope.scope(name, stream=stream) as sid:
                    held, expected = backend.request(kind, t, r, stream)
                    barrier.wait()  # the four requests are open, each holding its memory
                    live = gpuscope.scope_stats(sid)["live"]
                    if t == 0:
                        text = gpuscope.summary()
                        names = [f"req-{k}-{r}" for k in range(THREADS)]
                        summaries.append({"round": r, "named": all(re.search(rf"(?m)^ +{n} ", text) for n in names),
                                          "text": text if r == 0 else None})
                    barrier.wait()  # every reading is done before any request ends
                    backend.release(held, stream)
                with lock:
                    results.append({"thread": t, "round": r, "kind": kind, "expected": expected, "live": live})
        except Exception as e:  # noqa: BLE001 - a failed request is the result, and the others must not wait for it
            with lock:
                errors.append(f"thread {t}: {type(e).__name__}: {e}")
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return results, summaries, errors, (before or [gpuscope.stats()])[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("backend", choices=["torch", "host"])
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    backend = TorchBackend() if a.backend == "torch" else HostBackend()
    results, summaries, errors, before = serve(backend, a.rounds)
    backend.close()
    after = gpuscope.stats()
    mismatched = [x for x in results if x["live"] != x["expected"]]
    kinds = {k: sum(x["kind"] == k for x in results) for k in ("train", "infer")}
    print(json.dumps({
        "backend": a.backend,
        "threads": THREADS,
        "requests": len(results),
        "kinds": kinds,
        "each_in_its_own_scope": not mismatched and len(results) == THREADS * a.rounds,
        "mismatched": mismatched,
        "summaries_name_the_four": bool(summaries) and all(s["named"] for s in summaries),
        "ended_cleanly": not errors and after["allocated"] == before["allocated"] and after["open_scopes"] == before["open_scopes"],
        "allocated_before": before["allocated"], "allocated_after": after["allocated"],
        "open_scopes_before": before["open_scopes"], "open_scopes_after": after["open_scopes"],
        "c_failures": after["c_failures"] - before["c_failures"],
        "errors": errors,
        "summary": summaries[0]["text"] if summaries else None,
        "results": results,
    }))


if __name__ == "__main__":
    main()
