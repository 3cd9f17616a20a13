"""Prints the Markdown tables of one run of scripts/measure/pressure-gpu.sh
(sections smallest, free, cap12 and cap20) as docs/measurements.md shows
them:

    python3 scripts/measure/pressure_tables.py LOGDIR

Caps and ratios are multiples of the trace's peak requested bytes; times
are ms, medians of the runs the log holds (gpuscope's first pass is
repetitions[0].wall_ns, its warm pass the mean of the others; PyTorch's
first_ms and warm_ms). A row's smallest cap is in bold. Standard library
only."""
import json
import os
import statistics as st
import sys


def jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def name(path):
    return os.path.basename(path).removesuffix(".csv.gz")


def mode(m):
    return "expandable" if m.startswith("expandable") else m


def first_ms(r):
    return r["repetitions"][0]["wall_ns"] / 1e6


def warm_ms(r):
    reps = r["repetitions"][1:]
    return st.mean(x["wall_ns"] for x in reps) / 1e6 if reps else float("nan")


def main(logs):
    order = []
    caps = {}
    for line in open(os.path.join(logs, "caps.txt")):
        t, n = line.split()
        caps[t] = int(n)
        order.append(t)
    gs = {}
    for r in jsonl(os.path.join(logs, "smallest_gpuscope.jsonl")):
        gs.setdefault(name(r["trace"]), []).append(r)
    torch = {}
    for r in jsonl(os.path.join(logs, "smallest_torch.jsonl")):
        torch[(name(r["trace"]), mode(r["mode"]))] = r
    print("| workload | gpuscope: cap, time | PyTorch native: cap, time | PyTorch expandable: cap, time (reserved at its cap) |")
    print("|---|---|---|---|")
    for t in order:
        rs = gs.get(t, [])
        if not rs:
            continue
        peak = rs[0]["peak_requested_bytes"]
        ooms = sum(r["ooms"] for r in rs)
        cells = [(caps[t] / peak, st.median(first_ms(r) for r in rs))]
        for m in ("native", "expandable"):
            r = torch.get((t, m))
            cells.append((r["smallest_cap_bytes"] / peak, r["first_ms"]) if r else (float("nan"), float("nan")))
        best = min(c[0] for c in cells)
        out = []
        for c in cells:
            v = f"{c[0]:.5f}"
            out.append(f"{'**' + v + '**' if c[0] == best else v}, {c[1]:.1f}")
        r = torch.get((t, "expandable"))
        if r:
            out[2] += f" ({r['peak_reserved_bytes'] / peak:.5f})"
        note = "" if ooms == 0 else f" ({ooms} OOM)"
        print(f"| {t}{note} | " + " | ".join(out) + " |")
    print()
    free = {}
    for r in jsonl(os.path.join(logs, "free_gpuscope.jsonl")):
        free.setdefault(name(r["trace"]), []).append(r)
    tfree = {}
    for r in jsonl(os.path.join(logs, "free_torch.jsonl")):
        tfree.setdefault((name(r["trace"]), mode(r["mode"])), []).append(r)
    print("| trace | gpuscope: ratio, first, warm | native: ratio, first, warm | expandable: ratio, first, warm |")
    print("|---|---|---|---|")
    for t in order:
        rs = free.get(t)
        if not rs:
            continue
        row = [f"{st.median(r['reserved_ratio'] for r in rs):.5f}, {st.median(first_ms(r) for r in rs):.2f}, {st.median(warm_ms(r) for r in rs):.2f}"]
        for m in ("native", "expandable"):
            ts = tfree.get((t, m), [])
            if ts:
                row.append(f"{st.median(r['reserved_ratio'] for r in ts):.5f}, {st.median(r['first_ms'] for r in ts):.2f}, {st.median(r.get('warm_ms', float('nan')) for r in ts):.2f}")
            else:
                row.append("-")
        print(f"| {t} | " + " | ".join(row) + " |")
    print()
    far = {}
    for label in ("cap12", "cap20"):
        for r in jsonl(os.path.join(logs, label + "_gpuscope.jsonl")):
            far.setdefault((name(r["trace"]), label), []).append(r)
    if not any(c == "cap20" for _, c in far):
        # A run without cap20 (before it existed): one far cap.
        print("| trace | under the cap, ms | no cap, ms | ratio | handles created: cap, none |")
        print("|---|---|---|---|---|")
        for t in order:
            rs, fs = far.get((t, "cap12")), free.get(t)
            if not rs or not fs:
                continue
            a, b = st.median(first_ms(r) for r in rs), st.median(first_ms(r) for r in fs)
            print(f"| {t} | {a:.2f} | {b:.2f} | {a / b:.2f} | {rs[0]['source_allocs']}, {fs[0]['source_allocs']} |")
        return
    print("| trace | first pass, ms: 1.2x, 2x, no cap | over no cap: 1.2x, 2x | handles created: 1.2x, 2x, no cap |")
    print("|---|---|---|---|")
    for t in order:
        fs = free.get(t)
        if not fs or not any((t, c) in far for c in ("cap12", "cap20")):
            continue
        b = st.median(first_ms(r) for r in fs)
        ms, ratio, made = [], [], []
        for c in ("cap12", "cap20"):
            rs = far.get((t, c))
            if rs:
                a = st.median(first_ms(r) for r in rs)
                ms.append(f"{a:.2f}")
                ratio.append(f"{a / b:.2f}")
                made.append(str(rs[0]["source_allocs"]))
            else:
                ms.append("-")
                ratio.append("-")
                made.append("-")
        print(f"| {t} | {', '.join(ms)}, {b:.2f} | {', '.join(ratio)} | {', '.join(made)}, {fs[0]['source_allocs']} |")

if __name__ == "__main__":
    main(sys.argv[1])
