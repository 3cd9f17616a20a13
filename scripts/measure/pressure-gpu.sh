#!/usr/bin/env bash
# pressure-gpu.sh compares gpuscope's pool with PyTorch's caching allocator
# under the same caps on a GPU, in one run that ends with a verdict
# (docs/pool.md, "Under a memory cap"; issue 38). The next H200 run, in
# one device call:
#
#   first, in the checkout the device call carries (the session's own):
#     scripts/measure/pressure-gpu.sh build
#   then the device call, carry [".pressure"], timeout 600:
#     scripts/measure/pressure-gpu.sh run /tmp/press "$OUT"
#
# It comes back as $OUT/verdict.txt (pressure_tables.py --check: PASS, TIE
# or FAIL per workload, VERDICT last) and $OUT/pressure.tgz (the whole log
# folder: tar xzf it into a folder, which pressure_tables.py reads alone);
# run exits with the check's status (0: every row holds; 1: one fails; 2:
# a stand-in run, below, whose VERDICT line starts with STAND-IN). LOGDIR must be
# new or empty: on a machine already used, give another. Time, estimated
# from the pass times of docs/data/h200-2026-12-05-pressure-4 (where
# smallest, free and cap12 took 181 s with RUNS=3): 250-300 s on an H200
# with the default sections; cap20 adds as many first passes as cap12, the
# finer steps about seven passes to each of PyTorch's 34 bisections,
# smallest a replay a step under each of the 17 caps, before 16 replays.
#
# build (any machine with Go; cuda.h and the stub libcuda from
# scripts/cuda-sdk.sh) writes .pressure/: gpumem built with -tags cuda
# (gzipped), gpumem-before.gz (the same built at a682b2e, the pool before
# the pages for the largest blocks of c2db750, in a git worktree under
# /tmp that it removes), caps.txt (gpuscope's smallest cap per workload
# and the bisection's step, "NAME BYTES STEP", bisected on the simulated
# source by pool's TestEveryWorkloadFitsInWhatPyTorchExpandableNeeds
# -caps), commit.txt and driver.txt. DRIVER=sim builds without the tag, for
# a stand-in run where the simulated source plays the GPU (below).
#
# run LOGDIR OUTDIR [SECTION...] replays RUNS times (default 3), each
# section only if it starts before BUDGET seconds (default 480), into
# LOGDIR (new or empty: the logs are appended to), copies caps.txt,
# commit.txt and driver.txt there, writes RUNS to runs.txt (the check
# requires that many replays at each cap), records the machine (nvidia-smi -L, the
# driver, PyTorch) and the start and end (date -u) in machine.txt, writes
# tables.md (pressure_tables.py) and verdict.txt, and packs LOGDIR into
# OUTDIR/pressure.tgz with verdict.txt beside it (OUTDIR -: no packing).
# Sections (default smallest before free cap12 cap20):
#   smallest  PyTorch's smallest cap in each mode (torch.sh smallest, to a
#             millionth of the peak) on the shared traces and the
#             generated shapes (pool/testdata/shapes, every seed's file);
#             gpuscope's first pass at caps.txt's cap and, where it runs
#             out of memory on the GPU, raised by the step, doubled each
#             time (at most 20 times), and bisected back to the step (label
#             try); RUNS at the cap found (smallest: the trial there and
#             RUNS-1 more; the check fails a workload with another count)
#             and one a step under it (under), expected to run out of
#             memory: the cap is the smallest on the GPU too. That one is
#             noted in the verdict, not gated: the acceptance is a cap at or
#             under PyTorch's
#   before    on the 8 language-model shape files, at PyTorch's better
#             smallest cap (from smallest): gpumem-before's first pass
#             (label before) and today's (today): evidence that the pool
#             before c2db750 ran out of memory where today's does not
#   samecap   on each shared trace, at each of PyTorch's two smallest caps:
#             gpuscope's first pass and that PyTorch mode's, five times each
#   free      unconstrained, RUNS times each, on the shared traces and every
#             shape file: gpuscope (--repeat 3: the first pass, then warm
#             ones) and PyTorch in both modes
#   cap12     on each shared trace and each shape's seed-1 file, gpuscope's
#   cap20     first pass RUNS times under a cap of 1.2 (2) times its
#             unconstrained peak reserved (from free's lines, so after
#             free): a cap it never reaches
# The check needs smallest and free; a run without them fails it.
#
# Stand-in, to try the whole run without a GPU (the simulated source, of
# the H200's memory, plays the GPU; PyTorch's lines are those an H200 run
# recorded, scripts/measure/torch_recorded.sh):
#   DRIVER=sim scripts/measure/pressure-gpu.sh build
#   TORCH_SH=scripts/measure/torch_recorded.sh RUNS=1 scripts/measure/pressure-gpu.sh run /tmp/press-standin /tmp/press-out
# (then build again without DRIVER before a device run: run refuses
# nothing, but its VERDICT line starts with STAND-IN and it exits 2, so
# that a stand-in build carried to the device by mistake never reads as a
# pass).
#
# run needs the NVIDIA driver, PyTorch, the CUDA toolkit and g++ (torch.sh
# builds its replayer there). A replay that runs out of memory exits with 3
# and still prints its line; this script keeps it as a result.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=.pressure
usage="usage: $0 build | run LOGDIR OUTDIR [SECTION...]"
# before is the commit of gpumem-before: c2db750's parent.
before_commit=a682b2e
# h200Bytes: the simulated device of a stand-in run, as pool's tests use.
h200Bytes=150754820096
case "${1:-}" in
build)
  set -e
  driver=${DRIVER:-cuda}
  case $driver in
  cuda) tags=(-tags cuda) && eval "$(scripts/cuda-sdk.sh)" ;;
  sim) tags=() ;;
  *) echo "$0: DRIVER=$driver: want cuda or sim" >&2 && exit 64 ;;
  esac
  rm -rf "$out" && mkdir -p "$out"
  echo "$driver" >"$out/driver.txt"
  git describe --always --dirty --abbrev=12 >"$out/commit.txt" 2>/dev/null || echo unknown >"$out/commit.txt"
  go build "${tags[@]}" -ldflags='-s -w' -o "$out/gpumem" ./cmd/gpumem
  wt=/tmp/pressure-before-$$
  trap 'git worktree remove --force "$wt" 2>/dev/null; rm -rf "$wt"' EXIT
  git worktree add --quiet --detach "$wt" "$before_commit"
  (cd "$wt" && go build "${tags[@]}" -ldflags='-s -w' -o "$root/$out/gpumem-before" ./cmd/gpumem)
  git worktree remove --force "$wt"
  gzip -9 "$out/gpumem" "$out/gpumem-before"
  go test ./pool -count=1 -run '^TestEveryWorkloadFitsInWhatPyTorchExpandableNeeds$' -caps "$root/$out/caps.txt"
  echo "built $out/ ($driver): gpumem and gpumem-before ($before_commit), caps.txt for $(wc -l <"$out/caps.txt") workloads, commit $(cat "$out/commit.txt")"
  exit 0
  ;;
run)
  logs=${2:?$usage}
  dest=${3:?$usage}
  shift 3
  ;;
*)
  echo "$usage" >&2
  exit 64
  ;;
esac
for f in gpumem.gz gpumem-before.gz caps.txt commit.txt; do
  [ -e "$out/$f" ] || { echo "$0: $out/$f missing: run $0 build first (and carry $out)" >&2 && exit 1; }
done
if [ -e "$logs" ] && [ -n "$(ls -A "$logs")" ]; then
  echo "$0: $logs is not empty: the logs are appended to, give a new folder" >&2
  exit 1
fi
if [ "$dest" != - ]; then
  mkdir -p "$dest" || exit 1
  dest=$(realpath "$dest")
fi
mkdir -p "$logs" && logs=$(realpath "$logs")
driver=$(cat "$out/driver.txt" 2>/dev/null || echo cuda)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gzip -dc "$out/gpumem.gz" >"$bin/gpumem" && gzip -dc "$out/gpumem-before.gz" >"$bin/gpumem-before" && chmod +x "$bin"/* || exit 1
cp "$out/caps.txt" "$out/commit.txt" "$logs/" && echo "$driver" >"$logs/driver.txt"
sections=${*:-smallest before free cap12 cap20}
torch=${TORCH_SH:-scripts/measure/torch.sh} # TORCH_SH: another, to try the script without a GPU
shared=""
for t in mlp_train resnet50_train vit_infer_dynamic llama_prefill_dynamic; do
  shared="$shared cmd/gpumem/testdata/$t.csv.gz"
done
shapes=$(ls pool/testdata/shapes/*.csv.gz)
seed1=$(ls pool/testdata/shapes/*.csv.gz | grep -v '_s[0-9]*\.csv\.gz$')
lm=$(ls pool/testdata/shapes/train_large_vocab*.csv.gz pool/testdata/shapes/infer_dynamic_logits*.csv.gz)
runs=${RUNS:-3}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "$0: RUNS=$runs: want a count of 1 or more" >&2 && exit 64; }
echo "$runs" >"$logs/runs.txt"
source_flags=(--driver "$driver")
[ "$driver" = sim ] && source_flags+=(--capacity "$h200Bytes")
budget=${BUDGET:-480}
start=$(date +%s)
# has SECTION says whether to run it: asked for, and started before BUDGET
# seconds (default 480) have passed, so that the check and the packing
# still come back inside the device call's 600 s; machine.txt names a
# section skipped so.
has() {
  case " $sections " in *" $1 "*) ;; *) return 1 ;; esac
  local gone=$(($(date +%s) - start))
  [ $gone -lt "$budget" ] && return 0
  echo "skipped $1: $gone s gone of BUDGET=$budget" >>"$logs/machine.txt"
  return 1
}
{
  echo "start $(date -u)"
  echo "commit $(cat "$out/commit.txt")"
  echo "driver $driver$([ "$driver" = sim ] && echo ' (a stand-in: the simulated source played the GPU)')"
  echo "sections $sections"
  echo "runs $runs"
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch; print("torch", torch.__version__)'
} >"$logs/machine.txt" 2>&1
$torch build >>"$logs/machine.txt" 2>&1 || echo "torch.sh build failed" >>"$logs/machine.txt"

# replay BIN LABEL EXTRA ARGS... replays through BIN (a gpumem) and prints
# its JSON on one line, with the trace, LABEL and EXTRA's fields (a JSON
# object) added; it fails, saying why in stderr.txt, where gpumem failed
# other than by running out of memory (status 3).
replay() {
  local bin=$1 label=$2 extra=$3 json rc
  shift 3
  json=$("$bin" replay "${source_flags[@]}" "$@" 2>>"$logs/stderr.txt")
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then
    echo "$(basename "$bin") replay $*: exit $rc" >>"$logs/stderr.txt"
    return 1
  fi
  python3 -c '
import json, sys
d = json.loads(sys.argv[4])
d["trace"], d["label"] = sys.argv[2], sys.argv[3]
d.update(json.loads(sys.argv[1]))
print(json.dumps(d))' "$extra" "${@: -1}" "$label" "$json" 2>>"$logs/stderr.txt"
}
gs() { replay "$bin/gpumem" "$@"; }
# get FIELD prints a field of the JSON line on stdin.
get() { python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())[sys.argv[1]])' "$1"; }
name() { basename "$1" .csv.gz; }
file() {
  if [ -e "cmd/gpumem/testdata/$1.csv.gz" ]; then echo "cmd/gpumem/testdata/$1.csv.gz"; else echo "pool/testdata/shapes/$1.csv.gz"; fi
}

# try FILE CAP STEP: gpuscope's first pass on FILE under CAP, its line
# into $trials; fails with 1 where it ran out of memory, 2 where it did not
# run.
try() {
  local line
  line=$(gs try "{\"cap_bytes\": $2, \"step_bytes\": $3}" --max-reserved "$2" "$1") || return 2
  echo "$line" >>"$trials"
  [ "$(get ooms <<<"$line")" = 0 ] || return 1
}
if has smallest; then
  # shellcheck disable=SC2086
  $torch smallest $shared $shapes >"$logs/smallest_torch.jsonl" 2>>"$logs/stderr.txt"
  trials=$bin/trials.jsonl
  while read -r t sim step; do
    f=$(file "$t")
    [ -n "$step" ] || { echo "caps.txt: $t has no step: build again" >>"$logs/stderr.txt" && continue; }
    : >"$trials"
    # The simulator's cap; where the GPU runs out of memory there, raised
    # by the step, doubled each time (at most 20 times: up to a million
    # steps, the peak), then bisected back to the step between the last
    # cap that ran out and the first that fit.
    lo=0 hi=$sim add=$step n=0
    for ((;;)); do
      try "$f" "$hi" "$step"
      rc=$?
      [ $rc -ne 1 ] || [ $n -ge 20 ] && break
      lo=$hi hi=$((hi + add)) add=$((add * 2)) n=$((n + 1))
    done
    fit=$rc
    while [ $fit -eq 0 ] && [ $lo -gt 0 ] && [ $((hi - lo)) -gt "$step" ]; do
      mid=$((lo + (hi - lo) / 2))
      try "$f" "$mid" "$step"
      case $? in
      0) hi=$mid ;;
      1) lo=$mid ;;
      *) break ;;
      esac
    done
    # RUNS passes at the cap found (the trial there, RUNS-1 more), and one
    # a step under it.
    for ((i = 1; i < runs; i++)); do
      gs smallest "{\"cap_bytes\": $hi, \"step_bytes\": $step}" --max-reserved "$hi" "$f" >>"$trials"
    done
    gs under "{\"cap_bytes\": $((hi - step)), \"step_bytes\": $step}" --max-reserved $((hi - step)) "$f" >>"$trials"
    python3 -c '
import json, sys
cap, sim, step = (int(x) for x in sys.argv[2:])
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["label"] == "try" and d["cap_bytes"] == cap:
        d["label"] = "smallest"
    d["simulated_cap_bytes"], d["raised"] = sim, (cap - sim) // step
    print(json.dumps(d))' "$trials" "$hi" "$sim" "$step" >>"$logs/smallest_gpuscope.jsonl"
  done <"$out/caps.txt"
fi

# torch_cap TRACE prints PyTorch's smallest cap for TRACE in MODE (native,
# expandable, or best: the smaller), from the smallest section.
torch_cap() {
  python3 -c '
import json, sys
caps = {}
for l in open(sys.argv[1]):
    d = json.loads(l) if l.startswith("{") else {}
    if d.get("trace") == sys.argv[2] and "smallest_cap_bytes" in d:
        caps["expandable" if d["mode"].startswith("expandable") else d["mode"]] = d["smallest_cap_bytes"]
c = min(caps.values()) if sys.argv[3] == "best" and caps else caps.get(sys.argv[3])
if c is None:
    sys.exit(1)
print(c)' "$logs/smallest_torch.jsonl" "$1" "$2"
}

if has before; then
  for f in $lm; do
    if ! cap=$(torch_cap "$f" best 2>/dev/null); then
      echo "before: no PyTorch smallest cap for $f (run smallest first)" >>"$logs/stderr.txt"
      continue
    fi
    replay "$bin/gpumem-before" before "{\"cap_bytes\": $cap, \"commit\": \"$before_commit\"}" --max-reserved "$cap" "$f" >>"$logs/before_gpuscope.jsonl"
    gs today "{\"cap_bytes\": $cap}" --max-reserved "$cap" "$f" >>"$logs/before_gpuscope.jsonl"
  done
fi

if has samecap; then
  for f in $shared; do
    for mode in native expandable; do
      cap=$(torch_cap "$f" $mode 2>/dev/null) || continue
      for i in 1 2 3 4 5; do
        gs "$mode" "{\"cap_bytes\": $cap}" --max-reserved "$cap" "$f" >>"$logs/samecap_gpuscope.jsonl"
        MODES=$mode PASSES=1 CAP_BYTES=$cap $torch replay "$f" >>"$logs/samecap_torch.jsonl" 2>>"$logs/stderr.txt"
      done
    done
  done
fi

if has free; then
  for ((i = 0; i < runs; i++)); do
    for f in $shared $shapes; do
      gs free '{}' --repeat 3 "$f" >>"$logs/free_gpuscope.jsonl"
    done
    # shellcheck disable=SC2086
    $torch replay $shared $shapes >>"$logs/free_torch.jsonl" 2>>"$logs/stderr.txt"
  done
fi
# far LABEL TENTHS: gpuscope's first pass, RUNS times, under TENTHS/10
# times its unconstrained peak reserved, into LOGDIR/LABEL_gpuscope.jsonl.
far() {
  local label=$1 tenths=$2 f cap
  for f in $shared $seed1; do
    cap=$(grep "\"$f\"" "$logs/free_gpuscope.jsonl" | head -1 | python3 -c '
import json, sys
print(json.loads(sys.stdin.readline())["peak_reserved_bytes"] * int(sys.argv[1]) // 10)' "$tenths") || continue
    for ((i = 0; i < runs; i++)); do
      gs "$label" "{\"cap_bytes\": $cap}" --max-reserved "$cap" "$f" >>"$logs/${label}_gpuscope.jsonl"
    done
  done
}
if has cap12; then far cap12 12; fi
if has cap20; then far cap20 20; fi

echo "end $(date -u) ($(($(date +%s) - start)) s)" >>"$logs/machine.txt"
python3 scripts/measure/pressure_tables.py "$logs" >"$logs/tables.md" 2>&1
python3 scripts/measure/pressure_tables.py --check "$logs" >"$logs/verdict.txt" 2>&1
status=$?
cat "$logs/verdict.txt"
if [ "$dest" != - ]; then
  tar czf "$dest/pressure.tgz" -C "$logs" . && cp "$logs/verdict.txt" "$dest/verdict.txt"
  ls -la "$dest"
fi
exit $status
