"""Reads the logs of `sleep-gpu.sh run` and prints issue 46's GPU verdict:
one line a target, PASS, FAIL or NOT RUN, the figures behind it, and a last
line VERDICT: PASS (exit 0) or VERDICT: FAIL (exit 1). A run of the stand-in
(machine event "standin") ends STAND-IN VERDICT and exits 2, whatever its
lines say: it ran no GPU.

    python3 sleep_report.py LOGDIR

The targets: weights of 10 GiB at least; Sleep raises the driver's free
memory by 99% of what the scope held at least; while it sleeps, memory
that only its sleep left free is allocated by another allocator; Wake
gives the same data_ptr() and the same output bit for bit, after the
first cycle and after all of them; the cycles hold the driver's free
memory within 64 MiB, gpuscope's reserved bytes and its page-locked memory
flat; a KV cache dropped asleep wakes as zeros; a tensor freed asleep is
freed (what sleeps goes down by its bytes, no failure) and the tensor
beside it wakes at its address with its bytes; a Sleep and a Wake of the
steady cycles (the median) copy at half the host link's speed at least,
measured in the same run (the first Sleep also makes the page-locked
memory, and is shown apart); compute-sanitizer finds no error in a small
run. torch_memory_saver's times are shown where it is installed.
"""
import json
import os
import re
import statistics
import sys

GiB = 1 << 30
FLAT = 64 << 20  # the most the driver's free memory may move between cycles
LINK_SHARE = 0.5  # a steady Sleep or Wake copies at half the link's speed at least


def events(path):
    """The JSON objects of the file, one a line; other lines are skipped."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def first(evs, name, **match):
    for e in evs:
        if e.get("event") == name and all(e.get(k) == v for k, v in match.items()):
            return e
    return None


def gb(n):
    return f"{n / 1e9:.2f} GB"


def rate(nbytes, seconds):
    return nbytes / seconds if seconds > 0 else 0.0


def line(ok, text):
    """A verdict line: ok True (PASS), False (FAIL) or None (NOT RUN)."""
    return ("PASS " if ok else "NOT RUN " if ok is None else "FAIL ") + text


def weights_lines(evs):
    m = first(evs, "model")
    if m is None:
        return [line(None, "weights: the run made no model")]
    return [line(m["weights_bytes"] >= 10 * GiB,
                 f"weights: {m['weights_bytes'] / GiB:.2f} GiB of float32 in {m['layers']} tensors (at least 10 GiB)")]


def sleep_lines(evs):
    s, b = first(evs, "sleep", cycle=0), first(evs, "borrow")
    if s is None:
        return [line(None, "sleep: the run did not sleep")]
    held = s["before"]["reserved"] - s["after"]["reserved"]
    rise = s["after"]["driver_free"] - s["before"]["driver_free"]
    out = [line(held > 0 and rise >= 0.99 * held and s["after"]["sleeping_released"] == held,
                f"sleep gave the driver its memory: free memory rose by {gb(rise)}, {100 * rise / max(held, 1):.2f}% of the "
                f"{gb(held)} the scope held (at least 99%); gpuscope says {gb(s['after']['sleeping_released'])} released, "
                f"{gb(s['after']['sleeping_kept'])} kept in host memory")]
    if b is None:
        out.append(line(None, "borrow: nothing allocated the memory while the scope slept"))
    else:
        out.append(line(b["bytes"] > b["driver_free_before_sleep"] and b["bytes"] >= 0.9 * held,
                        f"while asleep, {b['by']} allocated {gb(b['bytes'])} beside gpuscope, where {gb(b['driver_free_before_sleep'])} "
                        f"was free before the sleep"))
    return out


def check_lines(evs, cycles):
    out = []
    for c, what in ((0, "the first wake"), (cycles, f"{cycles} cycles")):
        e = first(evs, "check", cycle=c)
        if e is None:
            out.append(line(None, f"after {what}: not checked"))
            continue
        out.append(line(e["same_ptrs"] and e["same_output"],
                        f"after {what}: the same data_ptr() for every weight: {e['same_ptrs']}; the model's output bit for bit: "
                        f"{e['same_output']}"))
    return out


def cycle_lines(evs):
    cyc = [e for e in evs if e.get("event") == "cycle"]
    if len(cyc) < 2:
        return [line(None, f"cycles: {len(cyc)} ran, too few to say they hold flat")], cyc
    free = [e["awake"]["driver_free"] for e in cyc]
    asleep = [e["asleep"]["driver_free"] for e in cyc]
    reserved = {e["awake"]["reserved"] for e in cyc}
    pinned = {e["awake"]["pinned_allocated"] + e["awake"]["pinned_cached"] for e in cyc}
    ok = max(free) - min(free) <= FLAT and max(asleep) - min(asleep) <= FLAT and len(reserved) == 1 and len(pinned) == 1
    return [line(ok, f"{len(cyc)} cycles hold flat: the driver's free memory awake within {gb(max(free) - min(free))} "
                     f"and asleep within {gb(max(asleep) - min(asleep))} (at most {gb(FLAT)}); gpuscope's reserved "
                     f"{sorted(gb(r) for r in reserved)}, page-locked {sorted(gb(p) for p in pinned)}")], cyc


def speed_lines(evs, cyc):
    bw, s0, w0 = first(evs, "bandwidth"), first(evs, "sleep", cycle=0), first(evs, "wake", cycle=0)
    if bw is None or not cyc or s0 is None:
        return [line(None, "speed: no bandwidth or no cycles in this run")]
    kept = s0["after"]["sleeping_kept"]
    sleep = statistics.median(e["sleep_seconds"] for e in cyc)
    wake = statistics.median(e["wake_seconds"] for e in cyc)
    out = [f"INFO the host link, page-locked, this run: device to host {bw['dtoh'] / 1e9:.1f} GB/s, host to device "
           f"{bw['htod'] / 1e9:.1f} GB/s"]
    for name, secs, link in (("sleep", sleep, bw["dtoh"]), ("wake", wake, bw["htod"])):
        r = rate(kept, secs)
        out.append(line(r >= LINK_SHARE * link,
                        f"{name} keeping {gb(kept)}: {secs:.3f} s, the median of {len(cyc)} cycles, {r / 1e9:.1f} GB/s, "
                        f"{100 * r / link:.0f}% of the link (at least {100 * LINK_SHARE:.0f}%)"))
    w0s = w0["seconds"] if w0 else float("nan")
    out.append(f"INFO the first cycle: sleep {s0['seconds']:.3f} s (making its page-locked memory), wake {w0s:.3f} s")
    d = first(evs, "discard")
    if d is not None:
        out.append(f"INFO a KV cache of {gb(d['bytes'])} dropped asleep: sleep {d['sleep_seconds']:.3f} s, wake "
                   f"{d['wake_seconds']:.3f} s")
    return out


def discard_lines(evs):
    d = first(evs, "discard")
    if d is None:
        return [line(None, "discard: the run dropped no KV cache")]
    return [line(d["same_ptr"] and d["zeros"], f"a KV cache dropped asleep woke at the same address: {d['same_ptr']}, "
                                               f"as zeros: {d['zeros']}")]


def free_asleep_lines(evs):
    f = first(evs, "free_asleep")
    if f is None:
        return [line(None, "free asleep: the run freed no tensor asleep")]
    ok = f["failures"] == 0 and f["sleeping_drop"] == f["bytes"] and f["same_ptr"] and f["kept"]
    return [line(ok, f"a tensor of {gb(f['bytes'])} freed asleep: what sleeps went down by {gb(f['sleeping_drop'])}, "
                     f"{f['failures']} failures; the one beside it woke at its address: {f['same_ptr']}, with its bytes: "
                     f"{f['kept']}"),
            f"INFO what the wake took again went down by {gb(f['released_drop'])} at the free"]


def tms_lines(logdir):
    t = first(events(os.path.join(logdir, "tms.jsonl")), "tms")
    if t is None:
        return [line(None, "torch_memory_saver: not run")]
    if "not_run" in t:
        return [line(None, f"torch_memory_saver: {t['not_run']}")]
    s, w = statistics.median(t["sleep_seconds"][1:] or t["sleep_seconds"]), statistics.median(t["wake_seconds"][1:] or t["wake_seconds"])
    return [f"INFO torch_memory_saver (enable_cpu_backup), {gb(t['weights_bytes'])}: pause {s:.3f} s, resume {w:.3f} s "
            f"(medians), output bit for bit: {t['same_output']}"]


def sanitizer_lines(logdir):
    path = os.path.join(logdir, "sanitizer.txt")
    if not os.path.exists(path):
        return [line(None, "compute-sanitizer: not run")]
    with open(path) as f:
        text = f.read()
    m = re.search(r"ERROR SUMMARY: (\d+) error", text)
    done = first(events(path), "done") is not None
    if m is None:
        return [line(False, "compute-sanitizer: no ERROR SUMMARY in its output")]
    return [line(m.group(1) == "0" and done, f"compute-sanitizer (memcheck) on a small run: {m.group(1)} errors, the run "
                                             f"{'completed' if done else 'did not complete'}")]


def report(logdir):
    """The report's lines and the exit status: 0 PASS, 1 FAIL, 2 stand-in."""
    evs = events(os.path.join(logdir, "gpuscope.jsonl"))
    machine = first(evs, "machine") or {}
    errors = [e for e in evs if e.get("event") == "error"]
    cycles = len([e for e in evs if e.get("event") == "cycle"])
    out = [f"machine: {machine.get('gpu', 'unknown')}, torch {machine.get('torch', '?')}"]
    cap = first(evs, "cap")
    if cap:
        out.append(f"INFO the device's cap: {cap['cap_bytes'] / 2**30:.2f} GiB (set before the weights)")
    out += weights_lines(evs) + sleep_lines(evs) + check_lines(evs, cycles)
    lines_, cyc = cycle_lines(evs)
    out += lines_ + discard_lines(evs) + free_asleep_lines(evs) + speed_lines(evs, cyc) + tms_lines(logdir)
    out += sanitizer_lines(logdir)
    for e in errors:
        out.append(line(False, f"the {e['mode']} run failed: {e['error']}"))
    for name in ("failures.txt", "notrun.txt"):
        p = os.path.join(logdir, name)
        if os.path.exists(p):
            with open(p) as f:
                out += [("FAIL " if name == "failures.txt" else "NOT RUN ") + x.strip() for x in f if x.strip()]
    # torch_memory_saver is a comparison where installed: its absence fails nothing.
    failed = any(x.startswith("FAIL ") or (x.startswith("NOT RUN ") and "torch_memory_saver" not in x) for x in out)
    verdict = "FAIL" if failed else "PASS"
    if machine.get("standin"):
        out.append(f"STAND-IN VERDICT: {verdict} (a stand-in ran, not a GPU: no verdict on gpuscope)")
        return out, 2
    out.append(f"VERDICT: {verdict}")
    return out, 1 if failed else 0


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 64
    out, status = report(sys.argv[1])
    print("\n".join(out))
    return status


if __name__ == "__main__":
    sys.exit(main())
