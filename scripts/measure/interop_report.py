"""Reads the logs of `interop-gpu.sh run` and prints the figures of
docs/interop.md with issues 37's and 43's targets, each marked met or
missed.

    python3 interop_report.py LOGDIR
"""
import json
import os
import re
import statistics
import sys


def lines(path):
    if not os.path.exists(path):
        return []
    out = []
    for line in text(path).splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def text(path):
    """The file's text."""
    with open(path) as f:
        return f.read()


def verdict(ok):
    return "met" if ok else "MISSED"


def pairs(r):
    """What the pair cache and Go served of a row's pairs: gpuscope's
    counters, taken around the timed pairs."""
    return f"pair hits {r['pair_hits']}, allocs through Go {r['allocs']}, c_failures {r['c_failures']}"


def gpuscope_stats(st):
    """A process's gpuscope_stats, the counters that say who served its
    allocations."""
    return (f"pair hits {st.get('c_pair_hits')} of {st.get('c_pair_allocs')} (late {st.get('c_pair_late')}), "
            f"allocs {st.get('allocs')}, frees {st.get('frees')}, "
            f"served from cache {st.get('served_from_cache')}, c_failures {st.get('c_failures')}, ooms {st.get('ooms')}")


def hit_rate(st):
    """The share of a process's allocations that the pair cache served:
    its hits over the allocations it looked at (c_pair_allocs), or, from a
    library that does not count those, over its hits and the allocations
    that crossed into Go."""
    hits = st.get("c_pair_hits") or 0
    looked = st.get("c_pair_allocs") or hits + (st.get("allocs") or 0)
    return hits / looked if looked else 0.0


def lacking(m, modes):
    """The verdict for a comparison of modes where one of them has no runs
    in m, or None where all have: a target is met only on runs of every
    mode it compares."""
    gone = [k for k in modes if not m.get(k)]
    return f"MISSED: no runs of {', '.join(gone)}" if gone else None


def gb(n):
    return f"{n / 1e9:.3f} GB"


def by(rows, key):
    out = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


def spread(xs):
    """The range of xs as a share of their median, in percent."""
    return 100 * (max(xs) - min(xs)) / statistics.median(xs)


def timings(m, key, unit, what):
    """One line a mode: each process's figure in the order run, their
    median and spread."""
    out = []
    for k, v in m.items():
        xs = [r[key] for r in v]
        runs = ", ".join(f"{x:.2f}" for x in xs)
        out.append(f"  {k:10s} {what} {statistics.median(xs):8.2f} {unit} (median of {len(xs)}: {runs}; spread {spread(xs):.1f}%)")
    return out


def paired(m, a, b, key):
    """a / b within each round, where both ran in it."""
    ra = {r.get("round"): r[key] for r in m.get(a, [])}
    rb = {r.get("round"): r[key] for r in m.get(b, [])}
    return [(k, ra[k] / rb[k]) for k in ra if k in rb and k is not None]


TORCH_MODES = ("native", "expandable", "gpuscope")
MIN_STEPS = 50  # issue 37: a transformer trained for at least 50 steps


def torch_report(rows):
    if not rows:
        return ["PyTorch: no results -> MISSED (NOT RUN)"]
    m = by(rows, "mode")
    out = ["PyTorch: transformer training, dynamic sequence lengths"]
    ref = rows[0]["losses"]
    same = all(r["losses"] == ref for r in rows)
    counts = ", ".join(f"{k} x{len(m.get(k, []))}" for k in TORCH_MODES)
    short = f"MISSED: {len(ref)} steps, under the issue's {MIN_STEPS}" if len(ref) < MIN_STEPS else ""
    out.append(f"  losses of {len(ref)} steps, {len(rows)} runs ({counts}): "
               f"bit for bit the same: {same} -> {lacking(m, TORCH_MODES) or short or verdict(same)}")
    if not same:
        for k, v in m.items():
            first = next((i for i, (a, b) in enumerate(zip(v[0]['losses'], ref)) if a != b), None)
            out.append(f"    {k}: first step that differs from the first run's: {first}")
    step = {k: statistics.median(r["step_ms"] for r in v) for k, v in m.items()}
    peak = {k: max(r["peak_reserved"] for r in v) for k, v in m.items()}
    alloc = {k: max(r["peak_allocated"] for r in v) for k, v in m.items()}
    out.append(f"  step time: each process's mean over its {rows[0]['timed_steps']} timed steps (the warm-up untimed), in the order run")
    out += timings(m, "step_ms", "ms", "step")
    for k in m:
        out.append(f"  {k:10s} peak reserved {gb(peak[k])}   peak allocated {gb(alloc[k])}")
    for k, v in m.items():
        st = [gpuscope_stats(r["gpuscope_stats"]) for r in v if "gpuscope_stats" in r]
        if st:
            out.append(f"  {k:10s} stats, each process: " + "; ".join(st))
        rates = [hit_rate(r["gpuscope_stats"]) for r in v if "gpuscope_stats" in r]
        if rates:
            out.append(f"  {k:10s} pair cache served {', '.join(f'{x:.1%}' for x in rates)} of the allocations, "
                       "each process (c_pair_hits / c_pair_allocs)")
    gone = lacking(m, ("gpuscope", "native"))
    if gone:
        out.append(f"  step time gpuscope / native, medians: (target <= 1.02) -> {gone}")
    else:
        ratio = step["gpuscope"] / step["native"]
        out.append(f"  step time gpuscope / native, medians: {ratio:.4f} (target <= 1.02) -> {verdict(ratio <= 1.02)}")
        pr = paired(m, "gpuscope", "native", "step_ms")
        if pr:
            out.append("    the same within each round: " + ", ".join(f"{x:.4f}" for _, x in pr))
        if len(m["native"]) > 1:
            out.append(f"    native's own spread: {spread([r['step_ms'] for r in m['native']]):.1f}%")
    gone = lacking(m, TORCH_MODES)
    if gone:
        out.append(f"  peak reserved gpuscope vs the smaller of native and expandable -> {gone}")
    else:
        floor = min(peak["native"], peak["expandable"])
        out.append(f"  peak reserved gpuscope {gb(peak['gpuscope'])} vs the smaller of native and expandable {gb(floor)} "
                   f"-> {verdict(peak['gpuscope'] <= floor)}")
    return out


CUPY_MODES = ("pool", "gpuscope")
CUPY_PAIR_MODES = ("pool", "freelist", "gpuscope")  # interop_cupy.py pair's allocators


def cupy_report(rows):
    if not rows:
        return ["CuPy: no results -> MISSED (NOT RUN)"]
    m = by(rows, "mode")
    out = ["CuPy: matrix products and FFTs of varying sizes"]
    same = len({r["digest"] for r in rows}) == 1
    gone = lacking(m, CUPY_MODES)
    out.append(f"  results of {rows[0]['ops']} operations, {len(rows)} runs "
               f"({', '.join(f'{k} x{len(m.get(k, []))}' for k in CUPY_MODES)}): bit for bit the same: {same} -> {gone or verdict(same)}")
    t = {k: statistics.median(r["pass_ms_min"] for r in v) for k, v in m.items()}
    peak = {k: max(r["peak_reserved"] for r in v) for k, v in m.items()}
    out.append("  time of a pass: each process's fastest, in the order run")
    out += timings(m, "pass_ms_min", "ms", "pass")
    for k in m:
        out.append(f"  {k:10s} peak reserved {gb(peak[k])}")
    if gone:
        out.append(f"  time gpuscope / pool, medians: (target <= 1.02) -> {gone}")
        out.append(f"  peak reserved gpuscope vs pool -> {gone}")
    else:
        ratio = t["gpuscope"] / t["pool"]
        out.append(f"  time gpuscope / pool, medians: {ratio:.4f} (target <= 1.02) -> {verdict(ratio <= 1.02)}")
        out.append(f"  peak reserved gpuscope {gb(peak['gpuscope'])} vs pool {gb(peak['pool'])} -> {verdict(peak['gpuscope'] <= peak['pool'])}")
    return out


def streams_report(rows, err):
    """record_stream, onto a side stream and onto the default stream: each
    has its own verdict."""
    out = []
    for onto in ("side", "default"):
        out += ([""] if out else []) + streams_onto(onto, [r for r in rows if r.get("onto", "side") == onto], err)
    return out


STREAMS_WHAT = {
    "side": "a tensor of the default stream, written late by a side stream",
    "default": "a tensor of a side stream, written late by the default stream (FSDP's pattern)",
}


def streams_onto(onto, rows, err):
    """record_stream onto one stream: the wired run's late write must land
    in no new tensor, while the late stream was still busy; the unwired
    control must show the write landing, or the check has not shown that it
    can fail and the wired run's pass proves nothing."""
    out = [f"record_stream onto the {onto} stream: {STREAMS_WHAT[onto]} (interop_streams.py --onto {onto})"]
    got = {r["mode"]: r for r in rows if "late_write_landed_in_a_new_tensor" in r}
    w, u = got.get("wired"), got.get("unwired")
    if w is None:
        out.append(f"  wired: no result -> MISSED, NOT RUN{last_line(err)}")
    else:
        busy = w["late_stream_busy_after_the_allocations"]
        after_del = w.get("late_stream_busy_after_the_del")
        when = ("" if after_del is None else f"{'busy' if after_del else 'DONE'} after the del, ") + \
            f"{'busy' if busy else 'DONE'} after the allocations"
        out.append(f"  wired: {w['record_stream_calls']} record_stream calls reached gpuscope; the late stream was "
                   f"{when} ({w['allocations_ms']:.1f} ms); "
                   f"its late write landed in a new tensor: {w['late_write_landed_in_a_new_tensor']}; c_failures {w['c_failures']}")
        if w["late_write_landed_in_a_new_tensor"]:
            v = "MISSED: memory recorded on the late stream was reused before its work ran"
        elif w["record_stream_calls"] < 1 or w["c_failures"]:
            v = "MISSED: the hook did not reach gpuscope, or gpuscope refused it"
        elif not busy:
            v = "INCONCLUSIVE: the late stream had finished before the allocations did"
        elif u is None:
            v = "INCONCLUSIVE: the control gave no result, so nothing shows that the check can fail"
        elif not u["late_write_landed_in_a_new_tensor"]:
            v = "INCONCLUSIVE: the control's late write did not land, so nothing shows that the check can fail"
        else:
            v = "met"
        out.append(f"  -> {v}")
    if u is None:
        out.append(f"  unwired (the control): no result{last_line(err)}")
    else:
        landed = u["late_write_landed_in_a_new_tensor"]
        out.append(f"  unwired (the control, record_stream dropped): the late write landed in a new tensor: {landed} -> "
                   + ("the check can fail, as it should" if landed else "the check did NOT show that it can fail: the wired result proves nothing"))
    return out


def shim_report(path):
    """use_torch's shim, compiled once against the PyTorch of the run: met
    where the build printed the library's path."""
    built = [x.strip() for x in text(path).splitlines() if x.strip().endswith(".so")] if os.path.exists(path) else []
    if built:
        return [f"PyTorch shim (torch_shim.cpp) built against this PyTorch: {built[-1]} -> met"]
    if not os.path.exists(path) and not os.path.exists(path + ".err"):
        return ["PyTorch shim (torch_shim.cpp): no result -> MISSED (NOT RUN)"]
    return [f"PyTorch shim (torch_shim.cpp): not built -> MISSED{last_line(path + '.err')}"]


def server_report(rows):
    """The 4-thread server (issue 43): met where every request ran, each
    request's scope held exactly its own bytes while the four were open,
    every Summary read then named the four, and every scope ended with
    nothing left, with no failed call."""
    r = next((x for x in rows if "each_in_its_own_scope" in x), None)
    if r is None:
        return ["A server of 4 threads, a scope per request: no result -> MISSED (NOT RUN)"]
    kinds = r.get("kinds", {})
    why = [w for ok, w in (
        (r["backend"] == "torch", f"the {r['backend']} backend, not PyTorch"),
        (not r.get("errors"), "requests failed: " + "; ".join(r.get("errors", []))[:300]),
        (kinds.get("train", 0) > 0 and kinds.get("infer", 0) > 0, "training steps and inferences did not both run"),
        (r["each_in_its_own_scope"], f"{len(r.get('mismatched', []))} requests' scopes did not hold exactly their bytes"),
        (r["summaries_name_the_four"], "a Summary did not name the four open requests"),
        (r["ended_cleanly"], f"memory was left: {r['allocated_before']} bytes allocated before, {r['allocated_after']} after"),
        (r["c_failures"] == 0, f"{r['c_failures']} calls failed")) if not ok]
    out = [f"A server of 4 threads, a scope per request: {r['requests']} requests ({kinds.get('train', 0)} training steps, "
           f"{kinds.get('infer', 0)} inferences, interleaved), each scope exactly its request's bytes: "
           f"{r['each_in_its_own_scope']}, the Summaries name the four: {r['summaries_name_the_four']}, every scope ended "
           f"with nothing left: {r['ended_cleanly']} -> " + ("met" if not why else "MISSED: " + "; ".join(why))]
    for m in r.get("mismatched", [])[:4]:
        out.append(f"  request {m['thread']}-{m['round']} ({m['kind']}): its scope held {m['live']} bytes, it held {m['expected']}")
    return out


def hooks_report(rows):
    """PyTorch's allocator calls that the shim wires: met where
    empty_cache gave gpuscope's cache back, the memory fraction refused an
    allocation past it and served one under it, and graph capture was
    refused with gpuscope's why."""
    r = rows[0] if rows else None
    if r is None:
        return ["PyTorch's hooks through the shim: no result -> MISSED (NOT RUN)"]
    e, f, g = r["empty_cache"], r["memory_fraction"], r["graph_capture"]
    out = ["PyTorch's hooks through the shim (interop_hooks.py)"]
    out.append(f"  torch.cuda.empty_cache(): gpuscope reserved {gb(e['reserved_before'])} before, "
               f"{gb(e['reserved_after'])} after -> {verdict(e['acted'])}")
    out.append(f"  set_per_process_memory_fraction({f['fraction']}): past it {f.get('past')}; under it allocated: "
               f"{f['under_allowed']} -> {verdict(f['acted'])}")
    out.append(f"  CUDA graph capture: {g['message']} -> " + ("met (refused, with why)" if g["refused"] else "MISSED: not refused by gpuscope"))
    return out


def last_line(path):
    """The last line of a part's stderr, where it has one, to say why it
    gave no result."""
    if not os.path.exists(path):
        return ""
    given = [x.strip() for x in text(path).splitlines() if x.strip()]
    return f" (stderr: {given[-1]})" if given else ""


SIZES = (256, 1 << 20, 64 << 20)  # the sizes interop_pair.cpp, interop_pyalloc.py and interop_cupy.py pair time


def pair_report(rows):
    if not rows:
        return ["Allocation + free from C/C++: no results -> MISSED (NOT RUN)"]
    out = ["Allocation + free from C/C++ (ns per pair, median of rounds, [min, max])"]
    for s in SIZES:
        at = {r["allocator"]: [r] for r in rows if r["size"] == s}
        row = "   ".join(f"{k} {v[0]['median_ns']:.1f} [{v[0]['min_ns']:.1f}, {v[0]['max_ns']:.1f}]" for k, v in at.items())
        out.append(f"  {s:>9d} B: {row}")
        gone = lacking(at, ("gpuscope", "c10"))
        if gone:
            out.append(f"             gpuscope / c10: (target <= 1) -> {gone}")
        else:
            g, c = at["gpuscope"][0]["median_ns"], at["c10"][0]["median_ns"]
            out.append(f"             gpuscope / c10: {g / c:.3f} (target <= 1) -> {verdict(g <= c)}")
        for k, v in at.items():
            if "pair_hits" in v[0]:
                out.append(f"             {k}: {pairs(v[0])}")
    return out


def pyalloc_report(rows):
    if not rows:
        return ["torch.empty + del from Python: no results -> MISSED (NOT RUN)"]
    m = by(rows, "mode")
    out = ["torch.empty + del from Python (ns per pair, median over processes of each one's median)"]
    for size in SIZES:
        s = str(size)
        med = {k: statistics.median(r[s]["median_ns"] for r in v) for k, v in m.items()}
        out.append(f"  {size:>9d} B: " + "   ".join(f"{k} {v:.0f}" for k, v in med.items()))
        gone = lacking(m, ("gpuscope", "freelist"))
        if gone:
            out.append(f"             gpuscope / freelist: (target <= 1.10) -> {gone}")
        else:
            r = med["gpuscope"] / med["freelist"]
            out.append(f"             gpuscope / freelist: {r:.3f} (target <= 1.10) -> {verdict(r <= 1.10)}")
        for k, v in m.items():
            fr = [pairs(r[s]) for r in v if "pair_hits" in r[s]]
            if fr:
                out.append(f"             {k}, each process: " + "; ".join(fr))
        gone = lacking(m, ("native",))
        if gone:
            out.append(f"             against native: -> {gone}")
        else:
            out.append("             against native: " + "   ".join(f"{k} {med[k] / med['native']:.3f}" for k in med if k != "native"))
    return out


def cupy_pair_report(rows):
    """CuPy's pair through gpuscope against CFunctionAllocator over the
    minimal free list, and both against CuPy's own pool (issue 47): met
    where gpuscope's is at most 1.10 times the free list's at each size."""
    if not rows:
        return ["cupy.empty + del from Python: no results -> MISSED (NOT RUN)"]
    out = ["cupy.empty + del from Python (issue 47; ns per pair, the median over processes of each one's median "
           "of rounds taking turns)"]
    hows = sorted({r["callable"] for r in rows if "callable" in r})
    if hows:
        out.append("  use_cupy's function ran in " + "; ".join(hows))
    for size in SIZES:
        s = str(size)
        med = {k: statistics.median(r[s][k]["median_ns"] for r in rows) for k in CUPY_PAIR_MODES + ("gpuscope-unchecked",)
               if all(k in r[s] for r in rows)}
        out.append(f"  {size:>9d} B: " + "   ".join(f"{k} {v:.0f}" for k, v in med.items()))
        r = med["gpuscope"] / med["freelist"]
        within = [g / f for row in rows for g, f in zip(row[s]["gpuscope"].get("rounds_ns", ()),
                                                        row[s]["freelist"].get("rounds_ns", ()))]
        if within:
            # Each round runs the modes back to back: their ratio in a round
            # leaves out the machine's drift between rounds, which the
            # ratio of the modes' medians takes in.
            w = statistics.median(within)
            out.append(f"             gpuscope / freelist: within a round {w:.3f} (median of {len(within)} rounds' "
                       f"ratios; target <= 1.10) -> {verdict(w <= 1.10)}; of the medians {r:.3f}")
        else:
            out.append(f"             gpuscope / freelist: {r:.3f} (target <= 1.10) -> {verdict(r <= 1.10)}")
        out.append(f"             against the pool: freelist {med['freelist'] / med['pool']:.3f}, "
                   f"gpuscope {med['gpuscope'] / med['pool']:.3f}")
        if "gpuscope-unchecked" in med:
            out.append(f"             use_cupy's function (the current stream's allocator, the check of the pointer for "
                       f"CuPy's OutOfMemoryError) costs {med['gpuscope'] - med['gpuscope-unchecked']:.0f} ns a pair; "
                       f"unchecked / freelist "
                       f"{med['gpuscope-unchecked'] / med['freelist']:.3f}")
        g = [r[s]["gpuscope"] for r in rows]
        out.append("             gpuscope, each process: " + "; ".join(
            f"pair hits {x['pair_hits']} of {x['pair_allocs']}, allocs through Go {x['allocs']}, c_failures {x['c_failures']}"
            for x in g))
    return out


def both_report(rows):
    """Both frameworks on one pool under one cap: met where the cap bound
    (the pool reserved up to within one chunk of it and not past it), an
    allocation past it raised each framework's own out-of-memory error,
    with gpuscope's message naming the cap, the process went on (each
    framework allocated under the cap after, and a training step ran), and
    the Summary named both scopes."""
    if not rows:
        return ["PyTorch and CuPy on one pool: no result -> MISSED (NOT RUN)"]
    r = rows[0]
    later = {k: v for x in rows[1:] for k, v in x.items()}
    torch_past = later.get("torch_past_cap")
    cupy_past = r.get("cupy_past_cap")
    chunk = r.get("chunk", 0)
    bound = r["peak_reserved"] + chunk > r["cap"]
    why = [w for ok, w in ((bound, "the cap never bound"), (r["under_cap"], "reserved passed the cap"),
                           (r.get("cupy_oom_is_cupys"), "CuPy's allocation past the cap did not raise cupy.cuda.memory.OutOfMemoryError"),
                           (r.get("cupy_message_names_the_cap"), "CuPy's error does not carry gpuscope's message (the cap)"),
                           (later.get("torch_oom_is_torchs"), "PyTorch's allocation past the cap did not raise torch.cuda.OutOfMemoryError"),
                           (later.get("torch_message_names_the_cap"), "PyTorch's error does not carry gpuscope's message (the cap)"),
                           (later.get("went_on"), "the process did not go on: an allocation under the cap or a training step after failed"),
                           (r["both_named"], "the Summary does not name both scopes")) if not ok]
    out = [f"PyTorch and CuPy on one pool: cap {gb(r['cap'])}, peak reserved {gb(r['peak_reserved'])} "
           f"({100 * r['peak_reserved'] / r['cap']:.1f}% of the cap, {r.get('filled', 0)} chunks of {chunk >> 20} MiB filled it); "
           f"the Summary names both scopes: {r['both_named']} -> " + ("met" if not why else "MISSED: " + "; ".join(why))]
    out.append(f"  CuPy past the cap: {cupy_past}")
    out.append(f"  PyTorch past the cap: {torch_past if torch_past is not None else 'no result (the process ended first)'}")
    if "went_on" in later:
        out.append(f"  after: CuPy allocated under the cap {later.get('cupy_after')}, PyTorch {later.get('torch_after')}, "
                   f"a training step ran {later.get('step_after')}")
    return out


def sanitizer_report(path):
    """compute-sanitizer memcheck on a short PyTorch run through gpuscope:
    met where the run gave its result and the sanitizer found no error."""
    if not os.path.exists(path):
        return ["compute-sanitizer on a short PyTorch run: no result -> MISSED (NOT RUN)"]
    t = text(path)
    errors = re.findall(r"ERROR SUMMARY: (\d+) error", t)
    ran = any(r.get("mode") == "gpuscope" for r in lines(path))
    if not errors:
        v = "MISSED: no ERROR SUMMARY (the sanitizer did not finish)"
    elif not ran:
        v = "MISSED: the PyTorch run gave no result"
    else:
        v = verdict(int(errors[-1]) == 0)
    n = errors[-1] if errors else "?"
    return [f"compute-sanitizer on a short PyTorch run: {n} errors -> {v}"]


def cublas_report(path):
    """examples/cublas's CUDA test: met where it ran and passed."""
    if not os.path.exists(path):
        return ["cuBLAS GEMMs with a scope's workspace (examples/cublas): no result -> MISSED (NOT RUN)"]
    t = text(path)
    ok = "--- PASS" in t and "--- FAIL" not in t and "--- SKIP" not in t and re.search(r"(?m)^PASS$", t) is not None
    return [f"cuBLAS GEMMs with a scope's workspace (examples/cublas): its CUDA test "
            f"{'passed' if ok else 'did not pass'} -> {verdict(ok)}"]


# interop-gpu.sh's parts, as PARTS names them; SHIM_PARTS, those that use
# PyTorch's shim (shim.txt), which the harness builds where PARTS names one.
ALL_PARTS = ("streams", "server", "hooks", "both", "torch", "pair", "pyalloc", "cupy", "cublas", "sanitizer")
SHIM_PARTS = ("streams", "server", "hooks", "both", "torch", "pyalloc", "sanitizer")


def report(d):
    """The report of the logs in folder d, as lines: what the last run
    missed or never ran first. Where parts.txt (the harness's PARTS) names
    some parts only, the targets of the others are left out, and a line
    says which."""
    asked = text(f"{d}/parts.txt").split() if os.path.exists(f"{d}/parts.txt") else None
    # Each part's section, its part names, and whether a blank line follows.
    sections = [
        (SHIM_PARTS, lambda: shim_report(f"{d}/shim.txt"), True),
        (("streams",), lambda: streams_report(lines(f"{d}/streams.jsonl"), f"{d}/streams.jsonl.err"), True),
        (("server",), lambda: server_report(lines(f"{d}/server.jsonl")), True),
        (("hooks",), lambda: hooks_report(lines(f"{d}/hooks.jsonl")), True),
        (("both",), lambda: both_report(lines(f"{d}/both.txt")), True),
        (("torch",), lambda: torch_report(lines(f"{d}/torch.jsonl")), True),
        (("pair",), lambda: pair_report(lines(f"{d}/pair.jsonl")), True),
        (("pyalloc",), lambda: pyalloc_report(lines(f"{d}/pyalloc.jsonl")), True),
        (("cupy",), lambda: cupy_report(lines(f"{d}/cupy.jsonl")), True),
        (("cupy",), lambda: cupy_pair_report(lines(f"{d}/cupy_pair.jsonl")), True),
        (("sanitizer",), lambda: sanitizer_report(f"{d}/sanitizer.txt"), False),
        (("cublas",), lambda: cublas_report(f"{d}/cublas_test.txt"), False),
    ]
    out = []
    for parts, section, blank in sections:
        if asked is None or any(p in asked for p in parts):
            out += section() + [""] * blank
    if asked is None or "pair" in asked:
        if os.path.exists(f"{d}/pair_bench.txt"):
            out.append("libgpuscope's pair_bench (C), 256 B, 1 MiB, 64 MiB:")
            out += ["  " + x.rstrip() for x in text(f"{d}/pair_bench.txt").splitlines() if x.strip()]
    while out and not out[-1]:
        out.pop()
    left = [p for p in ALL_PARTS if asked is not None and p not in asked]
    if left:
        out += ["", f"Parts not asked for (PARTS={' '.join(asked)}), not read: {' '.join(left)}"]
    for name, what in (("failures.txt", "Parts that failed"), ("skipped.txt", "Parts the budget left out")):
        if os.path.exists(f"{d}/{name}"):
            out += ["", what + ":"] + ["  " + x.rstrip() for x in text(f"{d}/{name}").splitlines() if x.strip()]
    return out


def overall(out):
    """The run's verdict, from the report's lines: PASS where every target
    is met and no part failed or was left out, else FAIL with what is not.
    A target's line ends in "-> " and its verdict: met, MISSED or
    INCONCLUSIVE."""
    verdicts = [x.rsplit("-> ", 1)[1] for x in out if "-> " in x]
    met = sum(v.startswith("met") for v in verdicts)
    missed = sum(v.startswith("MISSED") for v in verdicts)
    inconclusive = sum(v.startswith("INCONCLUSIVE") for v in verdicts)
    failed, left = "Parts that failed:" in out, "Parts the budget left out:" in out
    if met and not (missed or inconclusive or failed or left):
        return f"VERDICT: PASS: {met} targets met"
    why = [f"{n} {w}" for n, w in ((missed, "MISSED"), (inconclusive, "INCONCLUSIVE")) if n]
    why += [w for ok, w in ((failed, "parts failed"), (left, "parts left out by the budget")) if ok]
    return f"VERDICT: FAIL: {', '.join(why) or 'nothing met'} ({met} met)"


def main():
    out = report(sys.argv[1])
    v = overall(out)
    print("\n".join(out + ["", v]))
    sys.exit(0 if v.startswith("VERDICT: PASS") else 1)


if __name__ == "__main__":
    main()
