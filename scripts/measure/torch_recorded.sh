#!/usr/bin/env bash
# torch_recorded.sh stands in for torch.sh where there is no GPU or
# PyTorch, to try scripts/measure/pressure-gpu.sh end to end (its header
# says how): it prints, for each trace given, the lines an H200 run of
# torch.sh recorded for it (TORCH_RECORDED, a run's folder; default
# docs/data/h200-2026-12-05-pressure-4), one per mode, in the shape
# torch.sh prints them. It measures nothing.
#
#   scripts/measure/torch_recorded.sh build | smallest TRACE... | replay TRACE...
#
# smallest adds step_bytes where the recorded line lacks it: a 10,000th of
# the peak requested, where torch_replay stopped before it recorded its
# step. replay under a cap (CAP_BYTES) has no recorded line and fails, as
# does a trace the run did not record.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rec=${TORCH_RECORDED:-$root/docs/data/h200-2026-12-05-pressure-4}
cmd=${1:-}
shift || true
case $cmd in
build) echo "torch_recorded.sh: the lines of $rec, no PyTorch" ;;
smallest | replay)
  [ -z "${CAP_BYTES:-}" ] || { echo "torch_recorded.sh: no recorded replay under a cap" >&2 && exit 64; }
  file=$rec/smallest_torch.jsonl
  [ "$cmd" = replay ] && file=$rec/free_torch.jsonl
  python3 -c '
import json, os, sys
want, seen, status = sys.argv[2:], set(), 0
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for t in want:
    rows = [d for d in lines if os.path.basename(d["trace"]) == os.path.basename(t)]
    if not rows:
        print(f"torch_recorded.sh: {t}: not recorded in {sys.argv[1]}", file=sys.stderr)
        status = 1
    for d in rows:
        if (t, d["mode"]) in seen:
            continue  # the first run of each mode
        seen.add((t, d["mode"]))
        d["trace"] = t
        if "smallest_cap_bytes" in d:
            d.setdefault("step_bytes", max(d["peak_requested_bytes"] // 10000, 1))
        print(json.dumps(d))
sys.exit(status)' "$file" "$@"
  ;;
*)
  echo "usage: $0 build | smallest TRACE... | replay TRACE..." >&2
  exit 64
  ;;
esac
