"""Checks sim.H200, the model of driver time, against one run of
scripts/measure/pressure-gpu.sh (its smallest section), as
docs/measurements.md ("The model of driver time against the GPU") reports
it. The simulated side is made here, at the run's commit, by

    python3 scripts/measure/pressure_report.py --sim-at-gpu-caps GPUMEM LOGDIR > LOGDIR/sim_at_gpu_caps.jsonl

(every workload of LOGDIR/smallest_gpuscope.jsonl replayed on the
simulated source under the cap it ran at on the GPU), and then

    python3 scripts/measure/pressure_report.py LOGDIR [SIM_RELEASE]

prints the Markdown: modelled against measured driver time at gpuscope's
smallest caps, and, where LOGDIR has them (scripts/measure/pool-gpu.sh's
pressure and calls sections), the replays with --release-threshold 0
(release_TRACE.json, against SIM_RELEASE, a path with TRACE in it,
default LOGDIR/sim_release_TRACE.json) and what a create waits after a
release (driver_calls.txt). The tables of the run itself are
scripts/measure/pressure_tables.py's. Standard library only; a measured
figure is the median of the runs the log holds."""
import re
import json
import os
import statistics as st
import subprocess
import sys


from pressure_tables import jsonl, smallest_runs  # the run's own tables' readers

if sys.argv[1] == "--sim-at-gpu-caps":
    # The same caps as the GPU's smallest, on the simulated source: the
    # same calls, modelled time.
    gpumem, logdir = sys.argv[2], sys.argv[3]
    for t, rs in smallest_runs(logdir).items():
        cap = rs[0]["cap_bytes"]
        out = subprocess.run([gpumem, "replay", "--max-reserved", str(cap), rs[0]["trace"]],
                             capture_output=True, text=True).stdout
        print(json.dumps(dict(trace=t, cap=cap, **{k: v for k, v in json.loads(out).items()
                                                   if k.startswith("driver") or k in ("ooms", "source_allocs")})))
    sys.exit(0)

logdir = sys.argv[1]
sim_release = sys.argv[2] if len(sys.argv) > 2 else f"{logdir}/sim_release_TRACE.json"
med = st.median

gpu = smallest_runs(logdir)  # the replays at gpuscope's cap, as labelled
simcap = {r["trace"]: r for r in jsonl(f"{logdir}/sim_at_gpu_caps.jsonl")}

print("The model of driver time at gpuscope's smallest cap on the H200 (same calls on the simulated source; ms, modelled / measured):\n")
kinds = ["create", "map", "set_access", "unmap", "release"]
print("| trace | all calls | " + " | ".join(kinds) + " |")
print("|---|---|" + "---|" * len(kinds))
for t, runs in gpu.items():
    s = simcap.get(t)
    if s is None:
        continue
    cells = []
    for k in kinds:
        meas = med(r["driver_ns_by_call"].get(k, 0) for r in runs) / 1e6
        mod = s.get("driver_ns_by_call", {}).get(k, 0) / 1e6
        cells.append(f"{mod:.2f} / {meas:.2f} = {mod / meas:.2f}" if meas and mod else "-")
    same = "" if s["driver_calls"] == runs[0]["driver_calls"] else " (calls differ)"
    meas = med(r["driver_ns"] for r in runs) / 1e6
    print(f"| {t} | {s['driver_ns'] / 1e6:.2f} / {meas:.2f} = {s['driver_ns'] / 1e6 / meas:.2f}{same} | " + " | ".join(cells) + " |")

TRACES = ["mlp_train", "resnet50_train", "vit_infer_dynamic", "llama_prefill_dynamic"]
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
