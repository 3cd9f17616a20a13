"""Makes docs/pool.md's tables of one run of scripts/measure/pool-gpu.sh's replays,
cpp and pressure sections: gpuscope against PyTorch's allocator from C++
unconstrained, the smallest cap of each, the time at it, the model of
driver time against the GPU, and the plot of resnet50_train's time against
its cap. The simulated figures (sim_smallest.jsonl, sim_at_gpu_caps.jsonl)
are made here, at the run's commit, by

    python3 scripts/measure/smallest_device.py --times 1 GPUMEM TRACES > LOGDIR/sim_smallest.jsonl
    python3 scripts/measure/pressure_report.py --sim-at-gpu-caps GPUMEM LOGDIR > LOGDIR/sim_at_gpu_caps.jsonl
    for t in TRACES; do  # the simulated device as large as the GPU, so that handles are cut alike
      GPUMEM replay --capacity $((143771 << 20)) --release-threshold 0 cmd/gpumem/testdata/$t.csv.gz > LOGDIR/sim_release_$t.json
    done

and then

    python3 scripts/measure/pressure_report.py LOGDIR DOCS [SIM_RELEASE]

prints the Markdown and writes DOCS/pool-pressure-curve.svg. SIM_RELEASE,
a path with TRACE in it, names the simulated replays with
--release-threshold 0 to compare (default LOGDIR/sim_release_TRACE.json),
so that a cost table changed after the run can be checked against it.
Standard library only. A figure is the median of the runs the log holds
for it."""
import re
import json
import statistics as st
import subprocess
import sys

TRACES = ["mlp_train", "resnet50_train", "vit_infer_dynamic", "llama_prefill_dynamic"]
FLOOR = {"mlp_train": 1.0001, "resnet50_train": 1.0027, "vit_infer_dynamic": 1.0089, "llama_prefill_dynamic": 1.0009}


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def passes(r):
    """The pass times of a line of scripts/measure/torch.sh, or of the
    two-pass lines of runs made before it (first_ms, second_ms)."""
    return r["pass_ms"] if "pass_ms" in r else [r["first_ms"], r["second_ms"]]


def name(path):
    return path.split("/")[-1].split(".")[0]


if sys.argv[1] == "--sim-at-gpu-caps":
    # The same caps as the GPU's smallest, on the simulated source, for the
    # model's check: same calls, modelled time.
    gpumem, logdir = sys.argv[2], sys.argv[3]
    for g in jsonl(f"{logdir}/smallest_gpuscope.jsonl"):
        out = subprocess.run([gpumem, "replay", "--max-reserved", str(g["cap"]), f"cmd/gpumem/testdata/{g['trace']}.csv.gz"],
                             capture_output=True, text=True).stdout
        print(json.dumps(dict(trace=g["trace"], cap=g["cap"], **{k: v for k, v in json.loads(out).items()
                                                                 if k.startswith("driver") or k == "ooms"})))
    sys.exit(0)

logdir, docs = sys.argv[1], sys.argv[2]
sim_release = sys.argv[3] if len(sys.argv) > 3 else f"{logdir}/sim_release_TRACE.json"
med = st.median

cpp = {}
for r in jsonl(f"{logdir}/torch_cpp.jsonl"):
    cpp.setdefault((name(r["trace"]), "native" if r.get("mode", r.get("conf")) == "native" else "expandable"), []).append(r)
gpu = {r["trace"]: r for r in jsonl(f"{logdir}/smallest_gpuscope.jsonl")}
sim = {r["trace"]: r for r in jsonl(f"{logdir}/sim_smallest.jsonl")}
simcap = {r["trace"]: r for r in jsonl(f"{logdir}/sim_at_gpu_caps.jsonl")}
torch = {m: {name(r["trace"]): r for r in jsonl(f"{logdir}/smallest_torch_{m}.jsonl")} for m in ("native", "expandable")}

print("Unconstrained, against PyTorch's allocator from C++ (ms, medians; ratio = peak reserved / peak requested):\n")
print("| trace | gpuscope: ratio, pass 1, passes 2-3 | PyTorch native: ratio, pass 1, passes 2-3 | PyTorch expandable: ratio, pass 1, passes 2-3 "
      "| pass 1 / faster PyTorch | passes 2-3 / faster PyTorch | driver calls, passes 2-3 |")
print("|---|---|---|---|---|---|---|")
for t in TRACES:
    runs = []
    i = 1
    while True:
        try:
            with open(f"{logdir}/replay_{t}_default{i}.json") as f:
                runs.append(json.load(f))
        except FileNotFoundError:
            break
        i += 1
    p1 = med(r["repetitions"][0]["wall_ns"] / 1e6 for r in runs)
    p23 = med(x["wall_ns"] / 1e6 for r in runs for x in r["repetitions"][1:])
    calls = sum(sum(x["driver_calls"].values()) for r in runs for x in r["repetitions"][1:])
    n, e = cpp[(t, "native")], cpp[(t, "expandable")]
    nf, ns = med(x["first_ms"] for x in n), med(p for x in n for p in passes(x)[1:])
    ef, es = med(x["first_ms"] for x in e), med(p for x in e for p in passes(x)[1:])
    print(f"| {t} | {runs[0]['reserved_ratio']:.4f}, {p1:.2f}, {p23:.2f} | {n[0].get('reserved_ratio', n[0].get('ratio')):.4f}, {nf:.2f}, {ns:.2f} "
          f"| {e[0].get('reserved_ratio', e[0].get('ratio')):.4f}, {ef:.2f}, {es:.2f} | {p1 / min(nf, ef):.2f} | {p23 / min(ns, es):.2f} | {calls} in {len(runs)} runs |")

print("\nThe smallest device (multiples of the peak requested; first pass there, ms):\n")
print("| trace | gpuscope, simulated (`--capacity`) | gpuscope on the H200 (`--max-reserved`): cap, time | "
      "PyTorch native: cap, time | PyTorch expandable: cap, time | best-fit floor |")
print("|---|---|---|---|---|---|")
for t in TRACES:
    g, tn, te = gpu[t], torch["native"][t], torch["expandable"][t]
    print(f"| {t} | **{sim[t]['ratio']:.4f}** | **{g['ratio']:.4f}**, {med(g['wall_ms']):.1f} | {tn['ratio']:.4f}, {tn.get('first_ms', tn.get('ms_at_min')):.1f} "
          f"| {te['ratio']:.4f}, {te.get('first_ms', te.get('ms_at_min')):.1f} | {FLOOR[t]} |")

print("\nThe model of driver time at gpuscope's smallest cap on the H200 (same calls on the simulated source; ms, modelled / measured):\n")
kinds = ["create", "map", "set_access", "unmap", "release"]
print("| trace | all calls | " + " | ".join(kinds) + " |")
print("|---|---|" + "---|" * len(kinds))
for t in TRACES:
    g, s = gpu[t], simcap[t]
    runs = g["driver_ns_by_call"]
    runs = runs if isinstance(runs, list) else [runs]
    cells = []
    for k in kinds:
        meas, mod = med(r.get(k, 0) for r in runs) / 1e6, s["driver_ns_by_call"].get(k, 0) / 1e6
        cells.append(f"{mod:.2f} / {meas:.2f} = {mod / meas:.2f}" if meas else "-")
    same = "" if s["driver_calls"] == g["driver_calls"] else " (calls differ)"
    meas = med(g["driver_ms"])
    print(f"| {t} | {s['driver_ns'] / 1e6:.2f} / {meas:.2f} = {s['driver_ns'] / 1e6 / meas:.2f}{same} | " + " | ".join(cells) + " |")

print("\nReleases (`--release-threshold 0`, every free gives back what it leaves unused; ms, modelled / measured):\n")
print("| trace | releases | create | release | unmap | all calls |")
print("|---|---|---|---|---|---|")
for t in TRACES:
    try:
        with open(f"{logdir}/release_{t}.json") as f:
            g = json.load(f)
        with open(sim_release.replace("TRACE", t)) as f:
            s = json.load(f)
    except FileNotFoundError:
        continue
    cells = []
    for k in ("create", "release", "unmap"):
        meas, mod = g["driver_ns_by_call"].get(k, 0) / 1e6, s["driver_ns_by_call"].get(k, 0) / 1e6
        cells.append(f"{mod:.2f} / {meas:.2f} = {mod / meas:.2f}" if meas else "-")
    print(f"| {t} | {g['driver_calls'].get('release', 0)} | " + " | ".join(cells)
          + f" | {s['driver_ns'] / 1e6:.2f} / {g['driver_ns'] / 1e6:.2f} = {s['driver_ns'] / g['driver_ns']:.2f} |")

# What a create waits after a release (BenchmarkDriverCalls'
# create_after_release, in runs that have it): sim.H200's
# PriceCreateAfterRelease is calibrated from the last column.
after = {}
try:
    with open(f"{logdir}/driver_calls.txt") as f:
        for line in f:
            m = re.match(r"BenchmarkDriverCalls/create_after_release/size=(\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op", line)
            if m:
                after.setdefault(m.group(1).replace("_", " "), []).append(float(m.group(3)))
except FileNotFoundError:
    pass
if "none" in after:
    base = med(after["none"])
    mean = st.mean(after["none"])
    print("\nA 2 MiB create right after the release of one handle (`BenchmarkDriverCalls`, us; "
          "wait = less the create after no release; the driver waits in some runs and not in others, so the mean is the expected wait):\n")
    print("| released | create, median | wait, median | wait, mean | runs |")
    print("|---|---|---|---|---|")
    for size, runs in after.items():
        print(f"| {size} | {med(runs) / 1e3:.1f} | {(med(runs) - base) / 1e3:.1f} | {(st.mean(runs) - mean) / 1e3:.1f} "
              f"| {', '.join(f'{x / 1e3:.0f}' for x in runs)} |")

# The curve: resnet50_train's replay time against its cap, with PyTorch's
# two modes at their smallest caps.
curve = [r for r in jsonl(f"{logdir}/curve_resnet50_train.jsonl")]
pts = sorted((r["ratio"], med(r["wall_ms"])) for r in curve if r["ratio"] > 0 and r["ooms"] == 0)
free = [med(r["wall_ms"]) for r in curve if r["ratio"] == 0]
peers = [(torch[m]["resnet50_train"]["ratio"], torch[m]["resnet50_train"]["ms_at_min"], m) for m in ("native", "expandable")]
W, H, L, B = 640, 360, 60, 40
xs = [x for x, _ in pts] + [x for x, _, _ in peers]
x0, x1 = min(xs) - 0.002, max(xs) + 0.002
y1 = max([y for _, y in pts] + [y for _, y, _ in peers] + free) * 1.15
X = lambda x: L + (x - x0) / (x1 - x0) * (W - L - 20)
Y = lambda y: H - B - y / y1 * (H - B - 20)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<line x1="{L}" y1="{H - B}" x2="{W - 20}" y2="{H - B}" stroke="black"/><line x1="{L}" y1="20" x2="{L}" y2="{H - B}" stroke="black"/>',
       f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle">cap / peak requested (resnet50_train, one H200)</text>',
       f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" text-anchor="middle">replay time, ms</text>']
for i in range(6):
    y = y1 * i / 5
    svg.append(f'<text x="{L - 6}" y="{Y(y) + 4}" text-anchor="end">{y:.0f}</text>')
for i in range(5):
    x = x0 + (x1 - x0) * i / 4
    svg.append(f'<text x="{X(x)}" y="{H - B + 16}" text-anchor="middle">{x:.3f}</text>')
svg.append('<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="' + " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in pts) + '"/>')
for x, y in pts:
    svg.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3" fill="#1f77b4"/>')
if free:
    svg.append(f'<line x1="{L}" y1="{Y(free[0]):.1f}" x2="{W - 20}" y2="{Y(free[0]):.1f}" stroke="#1f77b4" stroke-dasharray="4 4"/>')
    svg.append(f'<text x="{W - 24}" y="{Y(free[0]) - 4:.1f}" text-anchor="end" fill="#1f77b4">gpuscope with no cap</text>')
for x, y, m in peers:
    svg.append(f'<rect x="{X(x) - 4:.1f}" y="{Y(y) - 4:.1f}" width="8" height="8" fill="#d62728"/>')
    svg.append(f'<text x="{X(x) + 8:.1f}" y="{Y(y) + 4:.1f}" fill="#d62728">PyTorch {m} at its smallest cap</text>')
svg.append(f'<text x="{X(pts[0][0]) + 6:.1f}" y="{Y(pts[0][1]) - 8:.1f}" fill="#1f77b4">gpuscope</text>')
svg.append("</svg>")
with open(f"{docs}/pool-pressure-curve.svg", "w") as f:
    f.write("\n".join(svg) + "\n")
print("\nresnet50_train against its cap (gpuscope, ms):", ", ".join(f"{x:.4f}: {y:.1f}" for x, y in pts), "; no cap:", free)
