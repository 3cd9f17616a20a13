"""Finds, by bisection on gpumem replay --capacity (2 MiB steps), the
smallest simulated device each trace replays on without running out of
memory, and prints it as a multiple of the trace's peak requested bytes.

    go build -o /tmp/gpumem ./cmd/gpumem
    python3 scripts/smallest_device.py /tmp/gpumem cmd/gpumem/testdata/*.csv.gz

Bisection assumes that a larger device never fails where a smaller one
succeeds; it checks the end it returns."""
import json
import subprocess
import sys

gpumem, traces = sys.argv[1], sys.argv[2:]


# gpumem replay exits with status 3 when allocations ran out of memory,
# and still prints its JSON (its "ooms" counts them); any other non-zero
# status is an error.
OUT_OF_MEMORY = 3


def replay(trace, *args):
    r = subprocess.run([gpumem, "replay", *args, trace], capture_output=True, text=True)
    if r.returncode not in (0, OUT_OF_MEMORY):
        raise SystemExit(f"gpumem replay {' '.join(args)} {trace}: exit {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


for trace in traces:
    free = replay(trace)
    req = free["peak_requested_bytes"]
    lo, hi = req, free["peak_reserved_bytes"]
    while hi - lo > 2 << 20:
        mid = (lo + hi) // 2
        if replay(trace, "--capacity", str(mid))["ooms"] == 0:
            hi = mid
        else:
            lo = mid
    assert replay(trace, "--capacity", str(hi))["ooms"] == 0
    print(f"{trace}: {hi:,} bytes = {hi / req:.4f} x peak requested (unconstrained: {free['peak_reserved_bytes'] / req:.4f})")
