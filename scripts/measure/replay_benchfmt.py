"""Turns gpumem replay JSON files into Go benchmark lines, so that two
builds' replays made in one run can be compared with benchstat:

    python3 scripts/measure/replay_benchfmt.py LOGDIR before > before.txt
    python3 scripts/measure/replay_benchfmt.py LOGDIR after > after.txt
    go run golang.org/x/perf/cmd/benchstat@latest before.txt after.txt

It reads LOGDIR/ab_SIDE_TRACE_N.json (gpumem replay --repeat 3) and prints,
for each, the first pass and each later pass as BenchmarkReplay/TRACE/pass1
and .../warm, in ns per replay."""
import glob
import json
import os
import sys

logdir, side = sys.argv[1], sys.argv[2]
print("goos: linux\ngoarch: amd64\npkg: github.com/gpuscope/gpuscope/cmd/gpumem")
for path in sorted(glob.glob(f"{logdir}/ab_{side}_*.json")):
    trace = os.path.basename(path)[len(f"ab_{side}_"):].rsplit("_", 1)[0]
    with open(path) as f:
        reps = json.load(f)["repetitions"]
    print(f"BenchmarkReplay/{trace}/pass1 1 {reps[0]['wall_ns']} ns/op")
    for r in reps[1:]:
        print(f"BenchmarkReplay/{trace}/warm 1 {r['wall_ns']} ns/op")
