"""Draws docs/benchmarks.svg and prints the Markdown table of
docs/benchmarks.md from the logs of one GPU run (scripts/measure/gpu-validate.sh):
bench_go.txt (go test -bench, several counts) and bench_python.json.

    python3 scripts/measure/plot_benchmarks.py docs/data/h200-2026-11-30-l docs/benchmarks.svg

Standard library only. Each figure is the median of the runs in the log."""
import json
import math
import re
import statistics
import sys
from collections import defaultdict

logdir, out = sys.argv[1], sys.argv[2]
SIZES = [("256 B", "256_B", "256"), ("1 MiB", "1.00_MiB", "1048576"), ("64 MiB", "64.00_MiB", "67108864")]
runs = defaultdict(list)
for line in open(f"{logdir}/bench_go.txt"):
    m = re.match(r"BenchmarkAllocFree/(\S+)/size=(\S+)-\d+\s+\d+\s+([\d.]+) ns/op", line)
    if m:
        runs[(m.group(1), m.group(2))].append(float(m.group(3)))
py = json.load(open(f"{logdir}/bench_python.json"))

methods = [
    ("gpuscope Scope.Alloc + Scope.Free", lambda s: statistics.median(runs[("gpuscope-scope", s[1])])),
    ("gpuscope pool.Alloc + pool.Free", lambda s: statistics.median(runs[("gpuscope-pool", s[1])])),
    ("CuPy MemoryPool malloc + free", lambda s: py[f"cupy.MemoryPool/{s[2]}"]),
    ("cuMemAllocAsync + cuMemFreeAsync (pool kept)", lambda s: statistics.median(runs[("cuMemAllocAsync", s[1])])),
    ("torch.empty + del", lambda s: py[f"torch.empty+del/{s[2]}"]),
    ("cuMemAlloc + cuMemFree", lambda s: statistics.median(runs[("cuMemAlloc", s[1])])),
]
table = {name: [f(s) for s in SIZES] for name, f in methods}

print("| allocation + free | " + " | ".join(s[0] for s in SIZES) + " |")
print("|---|" + "---|" * len(SIZES))
for name, vals in table.items():
    print(f"| {name} | " + " | ".join(f"{v:,.0f} ns" for v in vals) + " |")
async_ = table["cuMemAllocAsync + cuMemFreeAsync (pool kept)"]
for name in ("gpuscope pool.Alloc + pool.Free", "gpuscope Scope.Alloc + Scope.Free"):
    print(f"\n{name}: " + ", ".join(f"{a / v:.1f}x" for a, v in zip(async_, table[name])) + " faster than cuMemAllocAsync")

# A grouped bar chart on a log scale.
W, H, left, top, bottom = 940, 420, 330, 30, 60
lo, hi = 10, 1_000_000
colors = ["#1b9e77", "#66a61e", "#7570b3", "#d95f02", "#e7298a", "#666666"]
def x(v):
    return left + (W - left - 30) * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
rows = len(methods)
band = (H - top - bottom) / rows
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{W/2}" y="18" text-anchor="middle" font-size="14">One allocation and free on an NVIDIA H200 (ns, log scale, lower is better)</text>']
for p in range(1, 7):
    v = 10 ** p
    svg.append(f'<line x1="{x(v):.1f}" y1="{top}" x2="{x(v):.1f}" y2="{H-bottom}" stroke="#ddd"/>')
    svg.append(f'<text x="{x(v):.1f}" y="{H-bottom+15}" text-anchor="middle">{v:,}</text>')
for i, (name, vals) in enumerate(table.items()):
    y0 = top + i * band
    svg.append(f'<text x="{left-8}" y="{y0+band/2+4:.1f}" text-anchor="end">{name}</text>')
    for j, v in enumerate(vals):
        h = band / (len(SIZES) + 1)
        y = y0 + h * (j + 0.5)
        svg.append(f'<rect x="{left}" y="{y:.1f}" width="{x(v)-left:.1f}" height="{h-2:.1f}" fill="{colors[j]}"/>')
        svg.append(f'<text x="{x(v)+4:.1f}" y="{y+h-4:.1f}" font-size="10">{v:,.0f}</text>')
for j, s in enumerate(SIZES):
    svg.append(f'<rect x="{left+j*90}" y="{H-25}" width="12" height="12" fill="{colors[j]}"/>')
    svg.append(f'<text x="{left+j*90+16}" y="{H-15}">{s[0]}</text>')
svg.append("</svg>")
open(out, "w").write("\n".join(svg) + "\n")
