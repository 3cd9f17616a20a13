"""Makes the pool's tables and plots (docs/measurements.md) from one run of
scripts/measure/pool-gpu.sh (replays on the GPU, PyTorch's replays, timelines) and
the same replays on the simulated source (sim_*.json, made here with
gpumem replay at the same commit):

    python3 scripts/measure/pool_report.py LOGDIR docs

prints the Markdown tables and writes DOCS/pool-curves.svg and
DOCS/pool-llama-timeline.svg. Standard library only. A figure is the median
of the runs the log holds for it."""
import csv
import gzip
import json
import statistics
import sys

logdir, docs = sys.argv[1], sys.argv[2]
TRACES = ["mlp_train", "resnet50_train", "vit_infer_dynamic", "llama_prefill_dynamic"]
STEPS = [0, 4194304, 10485760, 20971520, 67108864, 268435456]  # 10 MiB is the default
DEFAULT = 10485760
FLOOR = {"mlp_train": 1.0001, "resnet50_train": 1.0027, "vit_infer_dynamic": 1.0089, "llama_prefill_dynamic": 1.0009}


def load(path):
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text.strip().splitlines()[-1])  # PyTorch's scripts print one JSON line last


def torch(trace, mode):
    runs = [load(f"{logdir}/torch_{trace}_{mode}{i}.json") for i in (1, 2, 3)]
    ms = statistics.median(r["ns_per_op"] * r["events"] / 1e6 for r in runs)
    return ms, runs[0]["reserved_ratio"], [r["ns_per_op"] * r["events"] / 1e6 for r in runs]


def ours(trace, step):
    if step == DEFAULT:
        runs = [load(f"{logdir}/replay_{trace}_default{i}.json") for i in range(1, 6)]
    else:
        runs = [load(f"{logdir}/replay_{trace}_step{step}.json")]
    first = [r["repetitions"][0] for r in runs]
    return {
        "ratio": runs[0]["reserved_ratio"],
        "wall": statistics.median(f["wall_ns"] for f in first) / 1e6,
        "walls": [f["wall_ns"] / 1e6 for f in first],
        "driver": statistics.median(f["driver_ns"] for f in first) / 1e6,
        "calls": sum(first[0]["driver_calls"].values()),
        "later": [sum(rep["driver_calls"].values()) for r in runs for rep in r["repetitions"][1:]],
        "run": runs[0],
    }


def sim(trace, step):
    name = "default" if step == DEFAULT else f"step{step}"
    r = load(f"{logdir}/sim_{trace}_{name}.json")
    return r["repetitions"][0]["driver_ns"] / 1e6, r


def mib(step):
    return "exact" if step == 0 else f"{step >> 20} MiB"


# The table of the acceptance: one run, medians.
print("| trace | gpuscope (default): ratio, time | PyTorch native: ratio, time | PyTorch expandable: ratio, time | driver calls, pass 1 / passes 2-3 | best-fit floor |")
print("|---|---|---|---|---|---|")
for t in TRACES:
    o = ours(t, DEFAULT)
    nms, nr, _ = torch(t, "native")
    ems, er, _ = torch(t, "expandable")
    print(f"| {t} | **{o['ratio']:.4f}, {o['wall']:.2f} ms** | {nr:.4f}, {nms:.1f} ms | {er:.4f}, {ems:.1f} ms | "
          f"{o['calls']} / {max(o['later'])} | {FLOOR[t]} |")

print()
print("| trace | runs of gpuscope (ms) | runs of PyTorch native (ms) | runs of PyTorch expandable (ms) |")
print("|---|---|---|---|")
for t in TRACES:
    o = ours(t, DEFAULT)
    fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
    print(f"| {t} | {fmt(o['walls'])} | {fmt(torch(t, 'native')[2])} | {fmt(torch(t, 'expandable')[2])} |")

# The model against the GPU.
print()
print("| trace | driver calls (create / map / set_access / reserve_address) | modelled driver time | measured (median of 5) | model / measured |")
print("|---|---|---|---|---|")
for t in TRACES:
    o = ours(t, DEFAULT)
    m, r = sim(t, DEFAULT)
    c = r["repetitions"][0]["driver_calls"]
    same = c == o["run"]["repetitions"][0]["driver_calls"] and r["peak_reserved_bytes"] == o["run"]["peak_reserved_bytes"]
    assert same, f"{t}: the simulated and the GPU replay differ"
    print(f"| {t} | {c.get('create', 0)} / {c.get('map', 0)} / {c.get('set_access', 0)} / {c.get('reserve_address', 0)} | "
          f"{m:.2f} ms | {o['driver']:.2f} ms | {m / o['driver']:.2f} |")

# The curve, as a table too.
print()
print("| GrowthStep | " + " | ".join(TRACES) + " |")
print("|---|" + "---|" * len(TRACES))
for s in STEPS:
    cells = []
    for t in TRACES:
        o = ours(t, s)
        cells.append(f"{o['ratio']:.4f}, {o['wall']:.2f} ms, {o['calls']} calls")
    label = mib(s) + (" (default)" if s == DEFAULT else "")
    print(f"| {label} | " + " | ".join(cells) + " |")


# --- SVG
def svg_text(x, y, s, size=11, anchor="start", weight="normal", color="#222"):
    s = s.replace("&", "&amp;").replace("<", "&lt;")
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" fill="{color}">{s}</text>'


COL = {"gpuscope": "#1f77b4", "native": "#d62728", "expandable": "#ff7f0e", "requested": "#555"}

W, H = 980, 760
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       svg_text(W / 2, 24, "Reserved / peak requested against whole-replay time, one H200 run (lower left is better)", 14, "middle", "bold")]
pw, ph = 420, 290
for i, t in enumerate(TRACES):
    ox, oy = 70 + (i % 2) * (pw + 70), 60 + (i // 2) * (ph + 70)
    pts = [(ours(t, s)["wall"], ours(t, s)["ratio"], s) for s in STEPS]
    nms, nr, _ = torch(t, "native")
    ems, er, _ = torch(t, "expandable")
    xs = [p[0] for p in pts] + [nms, ems]
    ys = [p[1] for p in pts] + [nr, er, FLOOR[t]]
    x0, x1 = 0, max(xs) * 1.1
    y0, y1 = min(ys) - 0.01, max(ys) + 0.02
    X = lambda v: ox + (v - x0) / (x1 - x0) * pw
    Y = lambda v: oy + ph - (v - y0) / (y1 - y0) * ph
    out.append(f'<rect x="{ox}" y="{oy}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    out.append(svg_text(ox + pw / 2, oy - 8, t, 12, "middle", "bold"))
    for k in range(5):
        v = y0 + (y1 - y0) * k / 4
        out.append(f'<line x1="{ox}" x2="{ox + pw}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#eee"/>')
        out.append(svg_text(ox - 6, Y(v) + 4, f"{v:.3f}", 10, "end"))
        u = x0 + (x1 - x0) * k / 4
        out.append(svg_text(X(u), oy + ph + 14, f"{u:.1f}", 10, "middle"))
    out.append(svg_text(ox + pw / 2, oy + ph + 30, "milliseconds", 10, "middle"))
    out.append(f'<line x1="{ox}" x2="{ox + pw}" y1="{Y(FLOOR[t]):.1f}" y2="{Y(FLOOR[t]):.1f}" stroke="#2ca02c" stroke-dasharray="4,3"/>')
    out.append(svg_text(ox + pw - 4, Y(FLOOR[t]) - 4, "best-fit floor", 10, "end", color="#2ca02c"))
    path = " ".join(f"{'M' if j == 0 else 'L'}{X(x):.1f},{Y(y):.1f}" for j, (x, y, _) in enumerate(sorted(pts)))
    out.append(f'<path d="{path}" fill="none" stroke="{COL["gpuscope"]}" stroke-width="1.5"/>')
    for x, y, s in pts:
        r = 6 if s == DEFAULT else 3.5
        out.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="{r}" fill="{COL["gpuscope"]}" fill-opacity="{0.9 if s == DEFAULT else 0.6}"/>')
        if s in (0, DEFAULT, STEPS[-1]):
            out.append(svg_text(X(x) + 7, Y(y) - 5, mib(s) + (" (default)" if s == DEFAULT else ""), 9, color=COL["gpuscope"]))
    for name, (x, y) in (("PyTorch native", (nms, nr)), ("PyTorch expandable", (ems, er))):
        c = COL["native" if "native" in name else "expandable"]
        out.append(f'<rect x="{X(x) - 5:.1f}" y="{Y(y) - 5:.1f}" width="10" height="10" fill="{c}"/>')
        out.append(svg_text(X(x) - 8, Y(y) + 4, name, 10, "end", color=c))
out.append(svg_text(W / 2, H - 10, "gpuscope: one point per GrowthStep (exact, 4, 10, 20, 64, 256 MiB); PyTorch: median of three runs. Data: " + logdir, 11, "middle"))
out.append("</svg>")
with open(f"{docs}/pool-curves.svg", "w") as f:
    f.write("\n".join(out))

# The timeline of llama_prefill_dynamic.
series = {}
for name in ("gpuscope", "native", "expandable"):
    path = f"{logdir}/timeline_llama_prefill_dynamic_{name}.csv.gz"
    with gzip.open(path, "rt") as f:
        rows = list(csv.reader(f))[1:]
    series[name] = [(i, int(r[1]), int(r[2])) for i, r in enumerate(rows)]
n = len(series["gpuscope"])
W, H, ox, oy, pw, ph = 980, 460, 80, 50, 860, 340
ymax = max(r for s in series.values() for _, _, r in s) * 1.05
X = lambda i: ox + i / n * pw
Y = lambda v: oy + ph - v / ymax * ph
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       svg_text(W / 2, 24, "llama_prefill_dynamic on one H200: reserved memory after every allocation and free", 14, "middle", "bold"),
       f'<rect x="{ox}" y="{oy}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
for k in range(6):
    v = ymax * k / 5
    out.append(f'<line x1="{ox}" x2="{ox + pw}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#eee"/>')
    out.append(svg_text(ox - 6, Y(v) + 4, f"{v / 2**30:.0f} GiB", 10, "end"))
    out.append(svg_text(X(n * k / 5), oy + ph + 16, f"{int(n * k / 5):,}", 10, "middle"))
out.append(svg_text(ox + pw / 2, oy + ph + 34, "events of the trace (allocations and frees)", 11, "middle"))


def polyline(points, color, width, dash=""):
    # At most one point per pixel column: the largest value in it.
    cols = {}
    for i, v in points:
        c = int(X(i))
        cols[c] = max(cols.get(c, 0), v)
    d = " ".join(f"{'M' if j == 0 else 'L'}{c},{Y(v):.1f}" for j, (c, v) in enumerate(sorted(cols.items())))
    return f'<path d="{d}" fill="none" stroke="{color}" stroke-width="{width}" stroke-dasharray="{dash}"/>'


out.append(polyline([(i, q) for i, q, _ in series["gpuscope"]], COL["requested"], 1))
labels = [("requested", COL["requested"], max(q for _, q, _ in series["gpuscope"]))]
for name, label in (("native", "PyTorch native"), ("expandable", "PyTorch expandable"), ("gpuscope", "gpuscope")):
    out.append(polyline([(i, r) for i, _, r in series[name]], COL[name], 2.5 if name == "expandable" else 1.6,
                        "6,4" if name == "expandable" else ""))
    labels.append((label, COL[name], max(r for _, _, r in series[name])))
for j, (label, color, peak) in enumerate(labels):
    y = oy + 18 + j * 16
    out.append(f'<line x1="{ox + 14}" x2="{ox + 34}" y1="{y - 4}" y2="{y - 4}" stroke="{color}" stroke-width="2"/>')
    out.append(svg_text(ox + 40, y, f"{label}: peak {peak / 2**30:.2f} GiB", 11, color=color))
out.append(svg_text(W / 2, H - 12, f"Data: {logdir}/timeline_llama_prefill_dynamic_*.csv.gz (gpumem replay --timeline, scripts/measure/torch_timeline.py)", 11, "middle"))
out.append("</svg>")
with open(f"{docs}/pool-llama-timeline.svg", "w") as f:
    f.write("\n".join(out))
