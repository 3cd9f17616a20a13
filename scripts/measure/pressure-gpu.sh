#!/usr/bin/env bash
# pressure-gpu.sh compares gpuscope's pool with PyTorch's caching allocator
# under the same caps on a GPU, in one run that ends with a verdict
# (docs/pool.md, "Under a memory cap"; issues 38 and 45). The next H100 or
# H200 run, in one device call:
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
# a stand-in run, below, whose VERDICT line starts with STAND-IN; 143 or
# 130: it got TERM or INT). LOGDIR must be new or empty: on a machine
# already used, give another.
#
# A run cut short still comes back: every replay (and torch.sh's commands)
# runs under timeout -k 10 with the seconds left of BUDGET, each section
# stops before a workload once BUDGET is gone, tables.md, verdict.txt and
# pressure.tgz are written into OUTDIR after every section, and a TERM or
# INT stops the replay running and writes them at once. notrun.txt (and the
# verdict's NOT RUN lines) says what did not run and why; a workload cut
# short fails the check (its lines are missing or too few).
#
# Time, estimated
# from the pass times of docs/data/h200-2026-12-05-pressure-4 (where
# smallest, free and cap12 took 181 s with RUNS=3 over 17 workloads): 250-300
# s on an H200 with the default sections and those 17; cap20 adds as many
# first passes as cap12, the finer steps about seven passes to each of
# PyTorch's 34 bisections, smallest a replay a step under each of the caps,
# before 16 replays; the tables, verdict and packing after each section a
# few seconds each. With gpt2_train and the GPT-2 shapes (25 workloads, 8
# more before replays, about 290 gpumem runs of a first pass and PyTorch's
# 50 bisections in one process): 330-450 s, inside BUDGET's 480, and if
# not, cap20 and then cap12 are what BUDGET cuts; machine.txt gives each
# section's start, for the next plan (the stand-in below: 30 s). On an
# H100 (80 GB) the largest trace, gpt2_train at 17.35 GB, and the largest
# shape, train_large_vocab at 20 GB, fit many times over; the caps are
# bytes, not fractions of the device.
#
# build (any machine with Go; cuda.h and the stub libcuda from
# scripts/cuda-sdk.sh) writes .pressure/: gpumem built with -tags cuda
# (gzipped), gpumem-before-COMMIT.gz for each commit of before_commits (the
# same built at a682b2e, the pool before the pages for the largest blocks
# of c2db750, and at c633d74, before the pages for blocks of a handle or
# more, each in a git worktree under /tmp that it removes), caps.txt
# (gpuscope's smallest cap per workload and the bisection's step, "NAME
# BYTES STEP", bisected on the simulated source by pool's
# TestEveryWorkloadFitsInWhatPyTorchExpandableNeeds -caps), commit.txt and
# driver.txt. DRIVER=sim builds without the tag, for
# a stand-in run where the simulated source plays the GPU (below).
#
# run LOGDIR OUTDIR [SECTION...] replays RUNS times (default 3), each
# section and each workload only if it starts before BUDGET seconds
# (default 480), into
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
#   before    at PyTorch's better smallest cap (from smallest), the first
#             pass of an earlier pool (label before, with its commit) and
#             today's (today): gpumem at a682b2e on the 8 language-model
#             shape files, at c633d74 on gpt2_train and train_held_outputs'
#             files: evidence that the pool before c2db750 (and before the
#             pages for blocks of a handle or more) ran out of memory where
#             today's does not
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
out=${PRESSURE_DIR:-.pressure} # PRESSURE_DIR: another build, for the harness's own tests
usage="usage: $0 build | run LOGDIR OUTDIR [SECTION...]"
# before_commits are the earlier pools the before section replays:
# c2db750's parent (the largest blocks' pages, issue 38) and the parent of
# the pages for blocks of a handle or more (issue 45).
before_commits="a682b2e c633d74"
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
  # (|| true: set -e holds in the trap too, and once the worktree is
  # removed below, the remove here fails and would make the build's
  # status git's 128.)
  trap 'git worktree remove --force "$wt" 2>/dev/null || true; rm -rf "$wt"' EXIT
  for c in $before_commits; do
    git worktree add --quiet --detach "$wt" "$c"
    (cd "$wt" && go build "${tags[@]}" -ldflags='-s -w' -o "$root/$out/gpumem-before-$c" ./cmd/gpumem)
    git worktree remove --force "$wt"
  done
  gzip -9 "$out"/gpumem*
  go test ./pool -count=1 -run '^TestEveryWorkloadFitsInWhatPyTorchExpandableNeeds$' -caps "$root/$out/caps.txt"
  echo "built $out/ ($driver): gpumem and gpumem-before-* ($before_commits), caps.txt for $(wc -l <"$out/caps.txt") workloads, commit $(cat "$out/commit.txt")"
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
for f in gpumem.gz caps.txt commit.txt $(for c in $before_commits; do echo "gpumem-before-$c.gz"; done); do
  [ -e "$out/$f" ] || { echo "$0: $out/$f missing: run $0 build first (and carry $out)" >&2 && exit 1; }
done
sections=${*:-smallest before free cap12 cap20}
for s in $sections; do
  case $s in
  smallest | before | samecap | free | cap12 | cap20) ;;
  *) echo "$0: no section $s: want smallest, before, samecap, free, cap12 or cap20" >&2 && exit 64 ;;
  esac
done
runs=${RUNS:-3}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "$0: RUNS=$runs: want a count of 1 or more" >&2 && exit 64; }
budget=${BUDGET:-480}
[[ $budget =~ ^[0-9]+$ ]] || { echo "$0: BUDGET=$budget: want seconds" >&2 && exit 64; }
if [ -e "$logs" ] && [ -n "$(ls -A "$logs")" ]; then
  echo "$0: $logs is not empty: the logs are appended to, give a new folder" >&2
  exit 1
fi
if [ "$dest" != - ]; then
  mkdir -p "$dest" || exit 1
  dest=$(realpath "$dest")
fi
mkdir -p "$logs" && logs=$(realpath "$logs")
start=$(date +%s)
driver=$(cat "$out/driver.txt" 2>/dev/null || echo cuda)
bin=$(mktemp -d)
tmp=$bin # the scratch folder, under a name that replay's own bin does not hide
trap 'rm -rf "$bin"' EXIT
for c in gpumem $(for c in $before_commits; do echo "gpumem-before-$c"; done); do
  gzip -dc "$out/$c.gz" >"$bin/$c" || exit 1
done
chmod +x "$bin"/* || exit 1
cp "$out/caps.txt" "$out/commit.txt" "$logs/" && echo "$driver" >"$logs/driver.txt"
echo "$runs" >"$logs/runs.txt"
torch=${TORCH_SH:-scripts/measure/torch.sh} # TORCH_SH: another, to try the script without a GPU
shared=""
for t in mlp_train resnet50_train vit_infer_dynamic llama_prefill_dynamic gpt2_train; do
  shared="$shared cmd/gpumem/testdata/$t.csv.gz"
done
shapes=$(ls pool/testdata/shapes/*.csv.gz)
seed1=$(ls pool/testdata/shapes/*.csv.gz | grep -v '_s[0-9]*\.csv\.gz$')
# The files each earlier pool of before_commits replays.
before_a682b2e=$(ls pool/testdata/shapes/train_large_vocab*.csv.gz pool/testdata/shapes/infer_dynamic_logits*.csv.gz)
before_c633d74="cmd/gpumem/testdata/gpt2_train.csv.gz $(ls pool/testdata/shapes/train_held_outputs*.csv.gz)"
source_flags=(--driver "$driver")
[ "$driver" = sim ] && source_flags+=(--capacity "$h200Bytes")

# What did not run, for notrun.txt: $tmp/notrun holds what will not (a
# section skipped, a workload stopped before, a command cut at the
# budget's end or by a signal); pending, the sections asked for and not
# begun; section, the one running.
: >"$tmp/notrun"
pending=" $sections "
section=
running= # the command running: its pid (timeout's) and what it runs
notrun() { echo "$section: $*" >>"$tmp/notrun"; }
left() { echo $((budget - ($(date +%s) - start))); }

# has SECTION says whether to run it: asked for, and started before BUDGET
# seconds (default 480) have passed, so that the check and the packing
# still come back inside the device call's 600 s; notrun.txt and
# machine.txt name a section skipped so. machine.txt notes the second at
# which each section asked for begins, for the next run's plan.
has() {
  case "$pending" in *" $1 "*) ;; *) return 1 ;; esac
  pending=${pending/ $1 / }
  section=$1
  local l
  l=$(left)
  echo "section $1 at $((budget - l)) s" >>"$logs/machine.txt"
  [ "$l" -gt 0 ] && return 0
  notrun "skipped, $((budget - l)) s gone of BUDGET=$budget"
  echo "skipped $1: $((budget - l)) s gone of BUDGET=$budget" >>"$logs/machine.txt"
  return 1
}

# inbudget WORKLOAD says whether the section may begin WORKLOAD: BUDGET is
# not gone. notrun.txt names the first workload a section stopped before.
inbudget() {
  local l
  l=$(left)
  [ "$l" -gt 0 ] && return 0
  notrun "stopped before $(name "$1") and what follows it: $((budget - l)) s gone of BUDGET=$budget"
  return 1
}

# bounded OUT CMD... runs CMD, its output appended to OUT and its errors to
# stderr.txt, under timeout -k 10 with the seconds left of BUDGET (killed
# 10 s after, where it ignores the TERM), and returns its status: 124 or
# 137 where the budget's end cut it (notrun.txt says so), 124 without
# running it where no time is left. It runs in the background and is
# waited for, so that a TERM or INT to the run is handled at once (bash
# runs a trap only once a foreground command ends).
bounded() {
  local o=$1 l rc what
  shift
  what=$*
  what=${what//$tmp\//} # the binaries' scratch folder says nothing
  l=$(left)
  [ "$l" -gt 0 ] || return 124
  timeout -k 10 "$l" "$@" >>"$o" 2>>"$logs/stderr.txt" 3>&- &
  running="$! $what"
  wait "${running%% *}"
  rc=$?
  running=
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    notrun "cut at the end of BUDGET=$budget (exit $rc): $what"
  fi
  return $rc
}

# save writes tables.md and verdict.txt from the logs so far, with
# notrun.txt (what did not run, and the sections not begun yet), and packs
# LOGDIR into OUTDIR/pressure.tgz with verdict.txt beside it: after every
# section and at the end, so that a run cut short brings back what ran.
# status is the check's.
save() {
  local s
  {
    cat "$tmp/notrun"
    for s in $pending; do echo "$s: not begun when this verdict was written"; done
  } >"$logs/notrun.txt"
  [ -s "$logs/notrun.txt" ] || rm -f "$logs/notrun.txt"
  python3 scripts/measure/pressure_tables.py "$logs" >"$logs/tables.md" 2>&1
  python3 scripts/measure/pressure_tables.py --check "$logs" >"$logs/verdict.txt" 2>&1
  status=$?
  if [ "$dest" != - ]; then
    tar czf "$dest/pressure.tgz.part" -C "$logs" . && mv "$dest/pressure.tgz.part" "$dest/pressure.tgz"
    cp "$logs/verdict.txt" "$dest/verdict.txt.part" && mv "$dest/verdict.txt.part" "$dest/verdict.txt"
  fi
}

# finish writes the end into machine.txt, saves and prints the verdict,
# once: at the end, or where the run is stopped (TERM, INT) before it. It
# prints to the run's own output (3), which a trap run inside a replay's
# redirection would not reach.
exec 3>&1
finished=0
finish() {
  [ $finished = 0 ] || return 0
  finished=1
  echo "end $(date -u) ($(($(date +%s) - start)) s)" >>"$logs/machine.txt"
  save
  cat "$logs/verdict.txt" >&3
  [ "$dest" = - ] || ls -la "$dest" >&3
}

# stop SIGNAL stops the command running, if one is, says in notrun.txt
# what the signal cut and what it left unbegun, and finishes.
stop() {
  local s
  trap '' TERM INT # a second signal would cut the saving short
  if [ -n "$running" ]; then
    kill -TERM "${running%% *}" 2>/dev/null
    notrun "stopped by $1 during ${running#* }"
  elif [ -n "$section" ]; then
    notrun "stopped by $1"
  fi
  for s in $pending; do echo "$s: not begun, the run got $1 first" >>"$tmp/notrun"; done
  pending=
  finish
}
trap 'stop TERM; exit 143' TERM
trap 'stop INT; exit 130' INT

{
  echo "start $(date -u)"
  echo "commit $(cat "$out/commit.txt")"
  echo "driver $driver$([ "$driver" = sim ] && echo ' (a stand-in: the simulated source played the GPU)')"
  echo "sections $sections"
  echo "runs $runs"
  echo "budget $budget"
  # Each under a limit too: a command that hangs here would take the run.
  timeout -k 5 30 nvidia-smi -L
  timeout -k 5 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  timeout -k 5 30 python3 -c 'import torch; print("torch", torch.__version__)'
} >"$logs/machine.txt" 2>&1
section=setup
bounded "$logs/machine.txt" "$torch" build || echo "torch.sh build failed" >>"$logs/machine.txt"
section=

# replay BIN LABEL EXTRA ARGS... replays through BIN (a gpumem) and prints
# its JSON on one line, with the trace, LABEL and EXTRA's fields (a JSON
# object) added; it fails, saying why in stderr.txt, where gpumem failed
# other than by running out of memory (status 3), or did not run.
replay() {
  local bin=$1 label=$2 extra=$3 rc
  shift 3
  : >"$tmp/json"
  bounded "$tmp/json" "$bin" replay "${source_flags[@]}" "$@"
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
print(json.dumps(d))' "$extra" "${@: -1}" "$label" "$(cat "$tmp/json")" 2>>"$logs/stderr.txt"
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
# run. (The line goes through a file, not $(...): a replay in a command
# substitution would hold off a TERM's trap until it ends.)
try() {
  gs try "{\"cap_bytes\": $2, \"step_bytes\": $3}" --max-reserved "$2" "$1" >"$tmp/line" || return 2
  cat "$tmp/line" >>"$trials"
  [ "$(get ooms <"$tmp/line")" = 0 ] || return 1
}
if has smallest; then
  # shellcheck disable=SC2086
  bounded "$logs/smallest_torch.jsonl" "$torch" smallest $shared $shapes
  trials=$tmp/trials.jsonl
  while read -r t sim step; do
    [ -n "$t" ] || continue
    f=$(file "$t")
    inbudget "$f" || break
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
  done <"$logs/caps.txt"
  section=
  save
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
  for c in $before_commits; do
    files=before_$c
    for f in ${!files}; do
      inbudget "$f" || break 2
      if ! cap=$(torch_cap "$f" best 2>/dev/null); then
        echo "before: no PyTorch smallest cap for $f (run smallest first)" >>"$logs/stderr.txt"
        continue
      fi
      replay "$bin/gpumem-before-$c" before "{\"cap_bytes\": $cap, \"commit\": \"$c\"}" --max-reserved "$cap" "$f" >>"$logs/before_gpuscope.jsonl"
      gs today "{\"cap_bytes\": $cap, \"commit\": \"$c\"}" --max-reserved "$cap" "$f" >>"$logs/before_gpuscope.jsonl"
    done
  done
  section=
  save
fi

if has samecap; then
  for f in $shared; do
    inbudget "$f" || break
    for mode in native expandable; do
      cap=$(torch_cap "$f" $mode 2>/dev/null) || continue
      for i in 1 2 3 4 5; do
        gs "$mode" "{\"cap_bytes\": $cap}" --max-reserved "$cap" "$f" >>"$logs/samecap_gpuscope.jsonl"
        bounded "$logs/samecap_torch.jsonl" env MODES=$mode PASSES=1 CAP_BYTES=$cap "$torch" replay "$f"
      done
    done
  done
  section=
  save
fi

if has free; then
  for ((i = 0; i < runs; i++)); do
    for f in $shared $shapes; do
      inbudget "$f" || break 2
      gs free '{}' --repeat 3 "$f" >>"$logs/free_gpuscope.jsonl"
    done
    # shellcheck disable=SC2086
    bounded "$logs/free_torch.jsonl" "$torch" replay $shared $shapes
  done
  section=
  save
fi
# far LABEL TENTHS: gpuscope's first pass, RUNS times, under TENTHS/10
# times its unconstrained peak reserved, into LOGDIR/LABEL_gpuscope.jsonl.
far() {
  local label=$1 tenths=$2 f cap
  for f in $shared $seed1; do
    inbudget "$f" || break
    cap=$(grep "\"$f\"" "$logs/free_gpuscope.jsonl" | head -1 | python3 -c '
import json, sys
print(json.loads(sys.stdin.readline())["peak_reserved_bytes"] * int(sys.argv[1]) // 10)' "$tenths") || continue
    for ((i = 0; i < runs; i++)); do
      gs "$label" "{\"cap_bytes\": $cap}" --max-reserved "$cap" "$f" >>"$logs/${label}_gpuscope.jsonl"
    done
  done
  section=
  save
}
if has cap12; then far cap12 12; fi
if has cap20; then far cap20 20; fi

# A signal now would only cut the last saving short.
trap '' TERM INT
section=
finish
exit $status
