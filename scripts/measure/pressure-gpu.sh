#!/usr/bin/env bash
# pressure-gpu.sh compares gpuscope's pool with PyTorch's caching allocator
# under the same caps on a GPU, in one run (docs/pool.md, "Under a memory
# cap"):
#
#   here:  scripts/measure/pressure-gpu.sh build
#   there: scripts/measure/pressure-gpu.sh run LOGDIR [SECTION...]
#
# build (any machine with Go; cuda.h and the stub libcuda from
# scripts/cuda-sdk.sh) writes .pressure/: gpumem built with -tags cuda
# (gzipped), caps.txt (gpuscope's smallest cap per workload, "NAME BYTES",
# bisected on the simulated source by pool's
# TestEveryWorkloadFitsInWhatPyTorchExpandableNeeds -caps) and commit.txt.
# A device run carries .pressure. run replays there with those, RUNS times
# (default 3); the default sections re-make the whole table of
# docs/measurements.md (smallest, free and cap12 with RUNS=3 took 181 s on
# the H200 of docs/data/h200-2026-12-05-pressure-4; cap20 adds as many
# first passes as cap12). Sections (default smallest free cap12 cap20):
#   smallest  PyTorch's smallest cap in each mode (torch.sh smallest) on the
#             shared traces and the generated shapes (pool/testdata/shapes,
#             every seed's file); gpuscope's first pass, three times, at
#             caps.txt's cap
#   samecap   on each shared trace, at each of PyTorch's two smallest caps:
#             gpuscope's first pass and that PyTorch mode's, five times each
#   free      unconstrained, RUNS times each, on the shared traces and every
#             shape file: gpuscope (--repeat 3: the first pass, then warm
#             ones) and PyTorch in both modes
#   cap12     on each shared trace and each shape's seed-1 file, gpuscope's
#   cap20     first pass RUNS times under a cap of 1.2 (2) times its
#             unconstrained peak reserved (from free's lines, so after
#             free): a cap it never reaches
#
# The older form, scripts/measure/pressure-gpu.sh GPUMEM CAPS LOGDIR
# [SECTION...], runs the same with a gpumem and caps file given.
#
# run needs the NVIDIA driver, PyTorch, the CUDA toolkit and g++ (torch.sh
# builds its replayer there). A replay that runs out of memory exits with 3
# and still prints its line; this script keeps it as a result.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=.pressure
usage="usage: $0 build | run LOGDIR [SECTION...] | GPUMEM CAPS LOGDIR [SECTION...]"
case "${1:?$usage}" in
build)
  set -e
  eval "$(scripts/cuda-sdk.sh)"
  rm -rf "$out" && mkdir -p "$out"
  git describe --always --dirty --abbrev=12 >"$out/commit.txt" 2>/dev/null || echo unknown >"$out/commit.txt"
  go build -tags cuda -ldflags='-s -w' -o "$out/gpumem" ./cmd/gpumem
  gzip -9 "$out/gpumem"
  go test ./pool -count=1 -run '^TestEveryWorkloadFitsInWhatPyTorchExpandableNeeds$' -caps "$root/$out/caps.txt"
  echo "built $out/: gpumem for the GPU, caps.txt for $(wc -l <"$out/caps.txt") workloads, commit $(cat "$out/commit.txt")"
  exit 0
  ;;
run)
  logs=${2:?$usage}
  shift 2
  [ -e "$out/gpumem.gz" ] && gunzip -f "$out/gpumem.gz" && chmod +x "$out/gpumem"
  gpumem=$(realpath "$out/gpumem")
  caps=$(realpath "$out/caps.txt")
  ;;
*)
  gpumem=$(realpath "$1")
  caps=$(realpath "${2:?$usage}")
  logs=${3:?$usage}
  shift 3
  ;;
esac
sections=${*:-smallest free cap12 cap20}
torch=${TORCH_SH:-scripts/measure/torch.sh} # TORCH_SH: another, to try the script without a GPU
shared=""
for t in mlp_train resnet50_train vit_infer_dynamic llama_prefill_dynamic; do
  shared="$shared cmd/gpumem/testdata/$t.csv.gz"
done
shapes=$(ls pool/testdata/shapes/*.csv.gz)
seed1=$(ls pool/testdata/shapes/*.csv.gz | grep -v '_s[0-9]*\.csv\.gz$')
runs=${RUNS:-3}
mkdir -p "$logs"
has() { case " $sections " in *" $1 "*) return 0 ;; esac; return 1; }
# gs replays through gpuscope on the GPU and prints its JSON on one line,
# with the trace and the label given first.
gs() {
  local label=$1
  shift
  "$gpumem" replay --driver cuda "$@" 2>>"$logs/stderr.txt" |
    python3 -c 'import json, sys; d = json.load(sys.stdin); d["trace"], d["label"] = sys.argv[1], sys.argv[2]; print(json.dumps(d))' "${@: -1}" "$label"
}
name() { basename "$1" .csv.gz; }
{
  date -u
  echo "commit $(cat "$out/commit.txt" 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "sections $sections"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch; print("torch", torch.__version__)'
} >"$logs/machine.txt" 2>&1
$torch build >>"$logs/machine.txt" 2>&1 || echo "torch.sh build failed" >>"$logs/machine.txt"

if has smallest; then
  # shellcheck disable=SC2086
  $torch smallest $shared $shapes >"$logs/smallest_torch.jsonl" 2>>"$logs/stderr.txt"
  while read -r t cap; do
    f=cmd/gpumem/testdata/$t.csv.gz
    [ -e "$f" ] || f=pool/testdata/shapes/$t.csv.gz
    for i in 1 2 3; do
      gs smallest --max-reserved "$cap" "$f" >>"$logs/smallest_gpuscope.jsonl"
    done
  done <"$caps"
fi

if has samecap; then
  for f in $shared; do
    t=$(name "$f")
    # PyTorch's smallest cap for this trace in each mode, from the section above.
    grep "\"$f\"" "$logs/smallest_torch.jsonl" | python3 -c '
import json, sys
for l in sys.stdin:
    d = json.loads(l)
    print(d["mode"], d["smallest_cap_bytes"])' >"$logs/caps_$t.txt"
    while read -r mode cap; do
      for i in 1 2 3 4 5; do
        gs "$mode" --max-reserved "$cap" "$f" >>"$logs/samecap_gpuscope.jsonl"
        MODES=${mode%%:*} PASSES=1 CAP_BYTES=$cap $torch replay "$f" >>"$logs/samecap_torch.jsonl" 2>>"$logs/stderr.txt"
      done
    done < <(sed 's/^expandable_segments:True/expandable/' "$logs/caps_$t.txt")
  done
fi

if has free; then
  for ((i = 0; i < runs; i++)); do
    for f in $shared $shapes; do
      gs free --repeat 3 "$f" >>"$logs/free_gpuscope.jsonl"
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
print(json.loads(sys.stdin.readline())["peak_reserved_bytes"] * int(sys.argv[1]) // 10)' "$tenths")
    for ((i = 0; i < runs; i++)); do
      gs "$label" --max-reserved "$cap" "$f" >>"$logs/${label}_gpuscope.jsonl"
    done
  done
}
if has cap12; then far cap12 12; fi
if has cap20; then far cap20 20; fi
ls -la "$logs"
