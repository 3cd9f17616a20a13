#!/usr/bin/env bash
# pressure-gpu.sh compares gpuscope's pool with PyTorch's caching allocator
# under the same caps on a GPU, in one run (docs/pool.md, "Under a memory
# cap"). Sections (all by default):
#   smallest  PyTorch's smallest cap in each mode (torch.sh smallest) on the
#             shared traces and the generated shapes (pool/testdata/shapes,
#             every seed's file); gpuscope's first pass, three times, at the
#             smallest cap the simulated source finds (CAPS: lines "TRACE
#             BYTES", made by smallest_device.py)
#   samecap   on each shared trace, at each of PyTorch's two smallest caps:
#             gpuscope's first pass and that PyTorch mode's, five times each
#   free      unconstrained, RUNS times each (default 5), on the shared
#             traces and every shape file: gpuscope (--repeat 3: the first
#             pass, then warm ones) and PyTorch in both modes
#   cap12     on each shared trace and each shape's seed-1 file, gpuscope's
#             first pass RUNS times under a cap of 1.2 times its
#             unconstrained peak reserved (from free's lines, so after
#             free): a cap it never reaches
#
#   here:  go build -tags cuda -o GPUMEM ./cmd/gpumem   (with scripts/cuda-sdk.sh)
#   there: scripts/measure/pressure-gpu.sh GPUMEM CAPS LOGDIR [SECTION...]
#
# Needs the NVIDIA driver, PyTorch, the CUDA toolkit and g++ (torch.sh
# builds its replayer there). A replay that runs out of memory exits with 3
# and still prints its line; this script keeps it as a result.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
gpumem=$(realpath "${1:?usage: $0 GPUMEM CAPS LOGDIR [SECTION...]}")
caps=$(realpath "${2:?usage: $0 GPUMEM CAPS LOGDIR [SECTION...]}")
logs=${3:?usage: $0 GPUMEM CAPS LOGDIR [SECTION...]}
shift 3
sections=${*:-smallest samecap free cap12}
cd "$root"
torch=${TORCH_SH:-scripts/measure/torch.sh} # TORCH_SH: another, to try the script without a GPU
shared=""
for t in mlp_train resnet50_train vit_infer_dynamic llama_prefill_dynamic; do
  shared="$shared cmd/gpumem/testdata/$t.csv.gz"
done
shapes=$(ls pool/testdata/shapes/*.csv.gz)
seed1=$(ls pool/testdata/shapes/*.csv.gz | grep -v '_s[0-9]*\.csv\.gz$')
runs=${RUNS:-5}
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
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
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
if has cap12; then
  for f in $shared $seed1; do
    cap=$(grep "\"$f\"" "$logs/free_gpuscope.jsonl" | head -1 | python3 -c '
import json, sys
print(json.loads(sys.stdin.readline())["peak_reserved_bytes"] * 12 // 10)')
    for ((i = 0; i < runs; i++)); do
      gs cap12 --max-reserved "$cap" "$f" >>"$logs/cap12_gpuscope.jsonl"
    done
  done
fi
ls -la "$logs"
