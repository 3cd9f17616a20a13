"""Reads the logs of `interop-gpu.sh run` and prints the figures of
docs/interop.md with issue 37's targets, each marked met or missed.

    python3 interop_report.py LOGDIR
"""
import json
import os
import statistics
import sys


def lines(path):
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def verdict(ok):
    return "met" if ok else "MISSED"


def gb(n):
    return f"{n / 1e9:.3f} GB"


def by(rows, key):
    out = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


def torch_report(rows):
    if not rows:
        return ["torch: no results"]
    m = by(rows, "mode")
    out = ["PyTorch: transformer training, dynamic sequence lengths"]
    ref = rows[0]["losses"]
    same = all(r["losses"] == ref for r in rows)
    out.append(f"  losses of {len(ref)} steps, {len(rows)} runs ({', '.join(f'{k} x{len(v)}' for k, v in m.items())}): "
               f"bit for bit the same: {same} -> {verdict(same)}")
    if not same:
        for k, v in m.items():
            first = next((i for i, (a, b) in enumerate(zip(v[0]['losses'], ref)) if a != b), None)
            out.append(f"    {k}: first step that differs from the first run's: {first}")
    step = {k: statistics.median(r["step_ms"] for r in v) for k, v in m.items()}
    peak = {k: max(r["peak_reserved"] for r in v) for k, v in m.items()}
    alloc = {k: max(r["peak_allocated"] for r in v) for k, v in m.items()}
    for k in m:
        runs = ", ".join("%.2f" % r["step_ms"] for r in m[k])
        out.append(f"  {k:10s} step {step[k]:8.2f} ms (median of {len(m[k])} runs: {runs})"
                   f"   peak reserved {gb(peak[k])}   peak allocated {gb(alloc[k])}")
    if "gpuscope" in step and "native" in step:
        ratio = step["gpuscope"] / step["native"]
        out.append(f"  step time gpuscope / native: {ratio:.4f} (target <= 1.02) -> {verdict(ratio <= 1.02)}")
    if {"gpuscope", "native", "expandable"} <= peak.keys():
        floor = min(peak["native"], peak["expandable"])
        out.append(f"  peak reserved gpuscope {gb(peak['gpuscope'])} vs the smaller of native and expandable {gb(floor)} "
                   f"-> {verdict(peak['gpuscope'] <= floor)}")
    return out


def cupy_report(rows):
    if not rows:
        return ["cupy: no results"]
    m = by(rows, "mode")
    out = ["CuPy: matrix products and FFTs of varying sizes"]
    same = len({r["digest"] for r in rows}) == 1
    out.append(f"  results of {rows[0]['ops']} operations, {len(rows)} runs: bit for bit the same: {same} -> {verdict(same)}")
    t = {k: statistics.median(r["pass_ms_min"] for r in v) for k, v in m.items()}
    peak = {k: max(r["peak_reserved"] for r in v) for k, v in m.items()}
    for k in m:
        runs = ", ".join("%.2f" % r["pass_ms_min"] for r in m[k])
        out.append(f"  {k:10s} pass {t[k]:8.2f} ms (median of {len(m[k])} runs' fastest: {runs})   peak reserved {gb(peak[k])}")
    if {"gpuscope", "pool"} <= t.keys():
        ratio = t["gpuscope"] / t["pool"]
        out.append(f"  time gpuscope / pool: {ratio:.4f} (target <= 1.02) -> {verdict(ratio <= 1.02)}")
        out.append(f"  peak reserved gpuscope {gb(peak['gpuscope'])} vs pool {gb(peak['pool'])} -> {verdict(peak['gpuscope'] <= peak['pool'])}")
    return out


def pair_report(rows):
    if not rows:
        return ["C pair: no results"]
    out = ["Allocation + free from C/C++ (ns per pair, median of rounds, [min, max])"]
    sizes = sorted({r["size"] for r in rows})
    for s in sizes:
        at = {r["allocator"]: r for r in rows if r["size"] == s}
        row = "   ".join(f"{k} {v['median_ns']:.1f} [{v['min_ns']:.1f}, {v['max_ns']:.1f}]" for k, v in at.items())
        out.append(f"  {s:>9d} B: {row}")
        if "gpuscope" in at and "c10" in at:
            g, c = at["gpuscope"]["median_ns"], at["c10"]["median_ns"]
            out.append(f"             gpuscope / c10: {g / c:.3f} (target <= 1) -> {verdict(g <= c)}")
    return out


def pyalloc_report(rows):
    if not rows:
        return ["Python pair: no results"]
    m = by(rows, "mode")
    out = ["torch.empty + del from Python (ns per pair, median over processes of each one's median)"]
    for s in ("256", str(1 << 20), str(64 << 20)):
        med = {k: statistics.median(r[s]["median_ns"] for r in v) for k, v in m.items()}
        out.append(f"  {int(s):>9d} B: " + "   ".join(f"{k} {v:.0f}" for k, v in med.items()))
        if {"gpuscope", "freelist"} <= med.keys():
            r = med["gpuscope"] / med["freelist"]
            out.append(f"             gpuscope / freelist: {r:.3f} (target <= 1.10) -> {verdict(r <= 1.10)}")
        if "native" in med:
            out.append("             against native: " + "   ".join(f"{k} {med[k] / med['native']:.3f}" for k in med if k != "native"))
    return out


def main():
    d = sys.argv[1]
    out = []
    for part in (torch_report(lines(f"{d}/torch.jsonl")), cupy_report(lines(f"{d}/cupy.jsonl")),
                 pair_report(lines(f"{d}/pair.jsonl")), pyalloc_report(lines(f"{d}/pyalloc.jsonl"))):
        out += part + [""]
    both = lines(f"{d}/both.txt")
    if both:
        r = both[0]
        out.append(f"PyTorch and CuPy on one pool: cap {gb(r['cap'])}, peak reserved {gb(r['peak_reserved'])}: "
                   f"under the cap -> {verdict(r['under_cap'])}; the Summary names both scopes -> {verdict(r['both_named'])}")
        out.append(f"  CuPy past the cap: {r.get('cupy_past_cap')}")
        for x in both[1:]:
            out.append(f"  PyTorch past the cap: {x.get('torch_past_cap')}")
    if os.path.exists(f"{d}/pair_bench.txt"):
        out.append("libgpuscope's pair_bench (C), 256 B, 1 MiB, 64 MiB:")
        out += ["  " + x.rstrip() for x in open(f"{d}/pair_bench.txt") if x.strip()]
    for r in lines(f"{d}/streams.jsonl"):
        if "late_write_landed_in_a_new_tensor" not in r:
            continue  # the first version of the check, which read addresses only
        bad = r["late_write_landed_in_a_new_tensor"]
        out.append(f"record_stream {r['mode']}: {r['record_stream_calls']} calls reached gpuscope; the side stream's late write "
                   f"landed in a new tensor: {bad} (side stream busy after the allocations: "
                   f"{r['side_stream_busy_after_the_allocations']}, {r['allocations_ms']:.1f} ms)"
                   + (f" -> {verdict(not bad)}" if r["mode"] == "wired" else " (the control)"))
    print("\n".join(out))


if __name__ == "__main__":
    main()
