"""Finds, by bisection to 1/10,000 of the peak, the smallest device each
trace replays on through gpuscope's pool without an allocation running out
of memory, and prints one JSON line per trace: the cap in bytes and as a
multiple of the trace's peak requested bytes, and the replay's time there.

    go build -o /tmp/gpumem ./cmd/gpumem
    python3 scripts/measure/smallest_device.py /tmp/gpumem cmd/gpumem/testdata/*.csv.gz
    # on a GPU, a cap on the pool instead of a smaller simulated device:
    python3 scripts/measure/smallest_device.py --driver cuda --flag max-reserved .gpubin/gpumem TRACE...
    # the replay's time at given caps (multiples of the peak; 0: no cap):
    python3 scripts/measure/smallest_device.py --curve 1.01,1.02,1.05,0 GPUMEM TRACE

--flag capacity (the default) simulates a device of that size (--driver sim
only); --flag max-reserved caps the pool (any driver). Bisection assumes a
larger device never fails where a smaller one succeeds, which holds only
roughly: the cap printed is rounded up to 1/10,000 of the peak and checked,
and raised by that step until a replay succeeds. The time at the cap is
each pass's wall_ns, --times replays (default 3)."""
import argparse
import json
import math
import subprocess

ap = argparse.ArgumentParser()
ap.add_argument("--driver", default="sim")
ap.add_argument("--flag", default="capacity", choices=["capacity", "max-reserved"])
ap.add_argument("--times", type=int, default=3)
ap.add_argument("--curve", default="")
ap.add_argument("gpumem")
ap.add_argument("traces", nargs="+")
args = ap.parse_args()
OUT_OF_MEMORY = 3


def replay(trace, cap=0):
    cmd = [args.gpumem, "replay", "--driver", args.driver]
    if cap:
        cmd += [f"--{args.flag}", str(cap)]
    # A replay whose allocations ran out of memory exits with status 3 and
    # still prints its JSON ("ooms" counts them); any other failure is an
    # error.
    out = subprocess.run(cmd + [trace], capture_output=True, text=True)
    if out.returncode not in (0, OUT_OF_MEMORY):
        raise SystemExit(f"{' '.join(cmd)} {trace}: exit {out.returncode}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def timed(trace, cap):
    runs = [replay(trace, cap) for _ in range(args.times)]
    return dict(ooms=max(r["ooms"] for r in runs), wall_ms=[r["wall_ns"] / 1e6 for r in runs],
                driver_ms=[r["driver_ns"] / 1e6 for r in runs], driver_calls=runs[0]["driver_calls"],
                driver_ns_by_call=[r["driver_ns_by_call"] for r in runs], peak_reserved=runs[0]["peak_reserved_bytes"])


for trace in args.traces:
    free = replay(trace)
    req = free["peak_requested_bytes"]
    name = trace.split("/")[-1].split(".")[0]
    if args.curve:
        for r in (float(x) for x in args.curve.split(",")):
            cap = int(r * req) if r else 0
            print(json.dumps(dict(trace=name, driver=args.driver, flag=args.flag, peak_requested=req, ratio=r,
                                  cap=cap, **timed(trace, cap))), flush=True)
        continue
    lo, hi = req - 1, max(free["peak_reserved_bytes"], req) + (64 << 20)
    while hi - lo > max(req // 10000, 1):
        mid = (lo + hi) // 2
        if replay(trace, mid)["ooms"] == 0:
            hi = mid
        else:
            lo = mid
    ratio = math.ceil(hi / req * 10000) / 10000
    while replay(trace, int(ratio * req))["ooms"] != 0:
        ratio = round(ratio + 0.0001, 4)
    cap = int(ratio * req)
    print(json.dumps(dict(trace=name, driver=args.driver, flag=args.flag, peak_requested=req, ratio=ratio, cap=cap,
                          unconstrained_ratio=free["reserved_ratio"], **timed(trace, cap))), flush=True)
