"""Prints the Markdown tables of one run of scripts/measure/pressure-gpu.sh
(sections smallest, free, cap12 and cap20) as docs/measurements.md shows
them, or, with --check, the run's verdict on issues 38's and 45's
comparison:

    python3 scripts/measure/pressure_tables.py LOGDIR
    python3 scripts/measure/pressure_tables.py --check LOGDIR

LOGDIR is the run's folder as it comes back (pressure.tgz unpacked): its
caps.txt lists the workloads. Caps and ratios are multiples of the trace's
peak requested bytes; times are ms, medians of the runs the log holds
(gpuscope's first pass is repetitions[0].wall_ns, its warm pass the mean of
the others; PyTorch's first_ms and warm_ms). A row's smallest cap is in
bold.

--check prints one line per workload of caps.txt and comparison, PASS,
TIE or FAIL with the numbers, and exits 1 on any FAIL (a workload without
lines fails, and so does a caps.txt without workloads):
  cap    gpuscope replayed at its cap (label smallest) as many times as the
         run asked for (RUNS, runs.txt: a folder without it fails), every
         replay there ran without running out of memory, and that cap is at
         or under the smaller of PyTorch's two modes' smallest caps. Both
         sides bisect to a step (step_bytes: a millionth of the peak) and
         stop within a step over their smallest cap, so caps within a step
         of each other are a TIE, which holds. The replay one step under
         gpuscope's cap is noted, not gated (it should run out of memory:
         the cap is the smallest there too; the acceptance is a cap at or
         under PyTorch's).
  ratio  gpuscope's median unconstrained peak reserved over peak requested
         at or under PyTorch expandable's (from bytes; equal is a TIE).
It then notes, not as a gate, the before section, one line per earlier
pool: on how many of its files gpumem at a682b2e (the pool before the
pages for the largest blocks, c2db750; the language-model shape files) or
at c633d74 (before the pages for blocks of a handle or more; gpt2_train and
train_held_outputs) ran out of memory at PyTorch's better smallest cap, and
on how many today's pool did, and lists the parts of
the run that did not run (notrun.txt, which pressure-gpu.sh writes: a
section skipped for the budget, a run stopped by a signal), one NOT RUN
line each. A stand-in run (driver.txt says sim: the simulated source
played the GPU) is no GPU verdict: its VERDICT line starts with STAND-IN
and it exits 2, whatever its rows say. Standard library only;
pressure_tables_test.py tests it."""
import argparse
import json
import os
import statistics as st
import sys

# The earlier pools of the before section (pressure-gpu.sh's
# before_commits), first the one of lines that name none.
BEFORE = ("a682b2e", "c633d74")
BEFORE_WHAT = {"a682b2e": "before the largest blocks' pages, c2db750",
               "c633d74": "before the pages for blocks of a handle or more"}

# The step of bisections before they recorded it (step_bytes): a
# 10,000th of the peak requested, in torch_replay and caps.txt alike.
OLD_STEP = 10000


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


def read_caps(logs):
    """caps.txt's workloads in order: name -> (cap, step); step is None in
    a caps.txt of two columns (before the step was written)."""
    caps = {}
    path = os.path.join(logs, "caps.txt")
    if not os.path.exists(path):
        raise SystemExit(f"{path}: missing: the run's folder holds the caps.txt it ran with")
    with open(path) as f:
        for n, line in enumerate(f, 1):
            w = line.split()
            if not w:
                continue
            if len(w) not in (2, 3) or not all(x.isdigit() for x in w[1:]):
                raise SystemExit(f"{path}:{n}: want NAME BYTES [STEP], got {line.strip()!r}")
            caps[w[0]] = (int(w[1]), int(w[2]) if len(w) == 3 else None)
    return caps


def read_runs(logs):
    """The replays at the cap per workload that the run asked for (RUNS,
    runs.txt), or None where the folder does not say."""
    path = os.path.join(logs, "runs.txt")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read().strip()
    if not text.isdigit() or int(text) < 1:
        raise SystemExit(f"{path}: want the count of runs asked for (RUNS), got {text!r}")
    return int(text)


def read_lines(logs, file):
    """The lines of logs/file that say something, or [] where it is not there."""
    path = os.path.join(logs, file)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]


def by_trace(rows, label=None):
    out = {}
    for r in rows:
        if label is None or r.get("label") == label:
            out.setdefault(name(r["trace"]), []).append(r)
    return out


def smallest_runs(logs):
    """gpuscope's replays at its cap per workload (label smallest), and the
    cap each ran under: cap_bytes where the run found it on the GPU,
    caps.txt's where the line does not say (runs before it bisected)."""
    caps = read_caps(logs)
    runs = by_trace(jsonl(os.path.join(logs, "smallest_gpuscope.jsonl")), "smallest")
    for t, rs in runs.items():
        for r in rs:
            if "cap_bytes" not in r and t in caps:
                r["cap_bytes"] = caps[t][0]
    return runs


def torch_smallest(logs):
    return {(name(r["trace"]), mode(r["mode"])): r for r in jsonl(os.path.join(logs, "smallest_torch.jsonl"))}


def ratio(r):
    return r["peak_reserved_bytes"] / r["peak_requested_bytes"]


def main(logs):
    order = list(read_caps(logs))
    gs = smallest_runs(logs)
    torch = torch_smallest(logs)
    print("| workload | gpuscope: cap, time | PyTorch native: cap, time | PyTorch expandable: cap, time (reserved at its cap) |")
    print("|---|---|---|---|")
    for t in order:
        rs = gs.get(t, [])
        if not rs:
            continue
        peak = rs[0]["peak_requested_bytes"]
        ooms = sum(r["ooms"] for r in rs)
        cells = [(rs[0]["cap_bytes"] / peak, st.median(first_ms(r) for r in rs))]
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



def check(logs, out=sys.stdout):
    """Prints the verdict on the run in logs and returns 0 where every row
    holds, 1 where one fails, a workload has no lines or there are no
    workloads, and 2 for a stand-in run, whatever its rows say."""
    caps = read_caps(logs)
    want_runs = read_runs(logs)
    gs = smallest_runs(logs)
    all_gs = by_trace(jsonl(os.path.join(logs, "smallest_gpuscope.jsonl")))
    torch = torch_smallest(logs)
    free = by_trace(jsonl(os.path.join(logs, "free_gpuscope.jsonl")))
    tfree = by_trace(r for r in jsonl(os.path.join(logs, "free_torch.jsonl")) if mode(r["mode"]) == "expandable")
    standin = read_lines(logs, "driver.txt") == ["sim"]
    if standin:
        print("STAND-IN: the simulated source played the GPU (pressure-gpu.sh built with DRIVER=sim): no GPU verdict", file=out)
    counts = {"PASS": 0, "TIE": 0, "FAIL": 0}

    def row(verdict, what, t, text):
        counts[verdict] += 1
        print(f"{verdict:<4} {what:<5} {t:<24} {text}", file=out)

    if not caps:
        row("FAIL", "caps", "-", "caps.txt lists no workloads: nothing was compared")
    for t, (listed, listed_step) in caps.items():
        rs = gs.get(t, [])
        nat, exp = torch.get((t, "native")), torch.get((t, "expandable"))
        if not rs or not nat or not exp:
            lack = [w for w, x in (("gpuscope at its cap", rs), ("PyTorch native", nat), ("PyTorch expandable", exp)) if not x]
            row("FAIL", "cap", t, "missing: no line for " + ", ".join(lack))
        else:
            peak = rs[0]["peak_requested_bytes"]
            cap = rs[0]["cap_bytes"]
            ooms = sum(r["ooms"] for r in rs)
            gstep = rs[0].get("step_bytes") or listed_step or max(peak // OLD_STEP, 1)
            tstep = max(r.get("step_bytes") or max(r["peak_requested_bytes"] // OLD_STEP, 1) for r in (nat, exp))
            step = max(gstep, tstep)
            best = min(nat, exp, key=lambda r: r["smallest_cap_bytes"])
            diff = cap - best["smallest_cap_bytes"]
            notes = []
            if want_runs is None:
                notes.append("runs.txt missing: how many runs at the cap the run asked for is unknown")
            elif len(rs) != want_runs:
                notes.append(f"{len(rs)} runs at the cap, the run asked for {want_runs} (runs.txt)")
            if rs[0].get("raised"):
                notes.append(f"{rs[0]['raised']} steps over the simulator's cap")
            under = [r for r in all_gs.get(t, []) if r.get("label") == "under"]
            if under:
                notes.append("one step under: " + ("out of memory" if all(r["ooms"] for r in under) else "FITS, not the smallest"))
            for m, r in (("native", nat), ("expandable", exp)):
                if r.get("oom"):
                    notes.append(f"PyTorch {m} ran out of memory at its cap")
            if ooms or len(rs) != want_runs:
                verdict = "FAIL"
            elif diff > step:
                verdict = "FAIL"
            elif abs(diff) <= step:
                verdict = "TIE"
            else:
                verdict = "PASS"
            row(verdict, "cap", t,
                f"gpuscope {cap / peak:.6f} ({len(rs)} runs, {ooms} out of memory), "
                f"PyTorch native {nat['smallest_cap_bytes'] / peak:.6f}, expandable {exp['smallest_cap_bytes'] / peak:.6f}; "
                f"{diff:+d} bytes from {mode(best['mode'])}'s, step {step} ({step / peak:.6f})"
                + "".join("; " + n for n in notes))
        fs, es = free.get(t), tfree.get(t)
        if not fs or not es:
            lack = [w for w, x in (("gpuscope", fs), ("PyTorch expandable", es)) if not x]
            row("FAIL", "ratio", t, "missing: no unconstrained line for " + ", ".join(lack))
            continue
        g, e = st.median(ratio(r) for r in fs), st.median(ratio(r) for r in es)
        row("FAIL" if g > e else "TIE" if g == e else "PASS", "ratio", t,
            f"unconstrained peak reserved / peak requested: gpuscope {g:.6f}, PyTorch expandable {e:.6f} "
            f"(medians of {len(fs)} and {len(es)})")

    before = jsonl(os.path.join(logs, "before_gpuscope.jsonl"))
    for c in sorted({r.get("commit", BEFORE[0]) for r in before}):
        rows = by_trace([r for r in before if r.get("commit", BEFORE[0]) == c])
        was = sorted(t for t, rs in rows.items() if any(r["label"] == "before" and r["ooms"] for r in rs))
        now = sorted(t for t, rs in rows.items() if any(r["label"] == "today" and r["ooms"] for r in rs))
        print(f"NOTE before {c}: at PyTorch's better smallest cap, gpumem at {c} ({BEFORE_WHAT.get(c, 'an earlier pool')}) "
              f"ran out of memory on {len(was)} of {len(rows)} files ({', '.join(was) or 'none'}); "
              f"today's pool on {len(now)} ({', '.join(now) or 'none'})", file=out)
    if not before:
        print("NOTE before: not run", file=out)
    notrun = read_lines(logs, "notrun.txt")
    for n in notrun:
        print(f"NOT RUN: {n}", file=out)
    failed = counts["FAIL"]
    print(f"{'STAND-IN ' if standin else ''}VERDICT: {'FAIL' if failed else 'PASS'}: {len(caps)} workloads, "
          f"{sum(counts.values())} rows: {counts['PASS']} PASS, {counts['TIE']} TIE, {failed} FAIL"
          + (f"; {len(notrun)} parts not run (NOT RUN above)" if notrun else ""), file=out)
    if standin:
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="The tables, or with --check the verdict, of a pressure-gpu.sh run.")
    ap.add_argument("--check", action="store_true",
                    help="print PASS, TIE or FAIL per workload; exit 1 on a FAIL, 2 for a stand-in run")
    ap.add_argument("logdir")
    args = ap.parse_args()
    if args.check:
        sys.exit(check(args.logdir))
    main(args.logdir)
