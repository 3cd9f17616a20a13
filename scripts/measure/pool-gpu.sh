#!/usr/bin/env bash
# pool-gpu.sh measures the pool on a GPU machine against PyTorch's caching
# allocator, in one run. Sections (all by default):
#   suite     every package's CUDA tests
#   calls     what each driver call costs (the simulated H200's cost table
#             comes from it)
#   replays   every shared trace through the pool, unconstrained, 7 runs of
#             --repeat 3 (first pass, then passes on a warm cache)
#   cpp       the same traces through PyTorch's allocator from C++, native
#             and expandable, 7 runs (scripts/measure/torch.sh replay)
#   pressure  the smallest cap each trace runs under: gpuscope (bisecting
#             --max-reserved on the GPU) and PyTorch native and expandable
#             (scripts/measure/torch.sh smallest), with the time at each;
#             resnet50_train's time against its cap; and each trace with
#             --release-threshold 0, whose frees give memory back
#   steps     the GrowthStep curve (--repeat 3 per step)
#   timeline  the reserved-memory timelines of llama_prefill_dynamic
# docs/measurements.md reports it; scripts/measure/pool_report.py and
# pressure_report.py make its tables and plots.
#
#   here:  scripts/measure/pool-gpu.sh build                   # scripts/gpu-test.sh build
#   there: scripts/measure/pool-gpu.sh run LOGDIR [SECTION...] # needs the NVIDIA driver, PyTorch,
#                                                               # the CUDA toolkit and g++
#
# gpumem replay writes its JSON to stdout and notes to stderr, kept apart
# (replay_stderr.txt); it exits with status 3 where allocations ran out of
# memory, which this script, without set -e, takes as a result ("ooms").
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
traces="mlp_train resnet50_train vit_infer_dynamic llama_prefill_dynamic"
steps="0 4194304 20971520 67108864 268435456"

case "${1:-}" in
build)
  set -e
  scripts/gpu-test.sh build
  if [ -n "$(git status --porcelain)" ]; then
    echo "pool-gpu: the working tree has changes; the run would not measure a commit" >&2
    exit 1
  fi
  git rev-parse HEAD >.gpubin/commit.txt
  ;;
run)
  logs=${2:?usage: $0 run LOGDIR [SECTION...]}
  shift 2
  sections=${*:-suite calls replays cpp pressure steps timeline}
  mkdir -p "$logs"
  logs=$(cd "$logs" && pwd)
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "pool-gpu: no NVIDIA GPU here: nothing was measured" >&2
    exit 2
  fi
  for z in .gpubin/*.gz; do
    [ -e "$z" ] && gunzip -f "$z" && chmod +x "${z%.gz}"
  done
  {
    date -u
    echo "commit $(cat .gpubin/commit.txt)"
    echo "sections $sections"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c 'import torch; print("torch", torch.__version__)'
  } >"$logs/machine.txt" 2>&1
  has() { case " $sections " in *" $1 "*) return 0 ;; esac; return 1; }
  if has suite; then
    scripts/gpu-test.sh run "$logs/suite" >"$logs/suite.txt" 2>&1
    echo "CUDA tests: exit $? ($(tail -1 "$logs/suite.txt"))" >>"$logs/machine.txt"
  fi
  if has calls; then
    (cd gpu/cuda && "$root/.gpubin/gpu_cuda.test" -test.run XXX -test.bench DriverCalls \
      -test.benchtime 200x -test.count 5) >"$logs/driver_calls.txt" 2>&1
  fi
  files=""
  for t in $traces; do files="$files cmd/gpumem/testdata/$t.csv.gz"; done
  for t in $traces; do
    f=cmd/gpumem/testdata/$t.csv.gz
    if has replays; then
      for i in 1 2 3 4 5 6 7; do
        .gpubin/gpumem replay --driver cuda --repeat 3 "$f" >"$logs/replay_${t}_default$i.json" 2>>"$logs/replay_stderr.txt"
      done
    fi
    if has steps; then
      for s in $steps; do
        .gpubin/gpumem replay --driver cuda --repeat 3 --growth-step "$s" "$f" >"$logs/replay_${t}_step$s.json" 2>>"$logs/replay_stderr.txt"
      done
    fi
  done
  if has cpp; then
    # Each trace seven times, native then expandable each time.
    # shellcheck disable=SC2086
    scripts/measure/torch.sh replay $files $files $files $files $files $files $files >"$logs/torch_cpp.jsonl" 2>"$logs/torch_stderr.txt"
  fi
  if has pressure; then
    # shellcheck disable=SC2086
    python3 scripts/measure/smallest_device.py --driver cuda --flag max-reserved .gpubin/gpumem $files \
      >"$logs/smallest_gpuscope.jsonl" 2>>"$logs/replay_stderr.txt"
    # shellcheck disable=SC2086
    MODES=native scripts/measure/torch.sh smallest $files >"$logs/smallest_torch_native.jsonl" 2>>"$logs/torch_stderr.txt"
    # shellcheck disable=SC2086
    MODES=expandable scripts/measure/torch.sh smallest $files >"$logs/smallest_torch_expandable.jsonl" 2>>"$logs/torch_stderr.txt"
    # Releases, for the model: every free gives back what it leaves unused.
    for t in $traces; do
      .gpubin/gpumem replay --driver cuda --release-threshold 0 cmd/gpumem/testdata/$t.csv.gz \
        >"$logs/release_$t.json" 2>>"$logs/replay_stderr.txt"
    done
    python3 scripts/measure/smallest_device.py --driver cuda --flag max-reserved \
      --curve 1.0086,1.009,1.01,1.0125,1.015,1.02,1.03,1.05,1.1,0 .gpubin/gpumem \
      cmd/gpumem/testdata/resnet50_train.csv.gz >"$logs/curve_resnet50_train.jsonl" 2>>"$logs/replay_stderr.txt"
  fi
  if has timeline; then
    t=llama_prefill_dynamic
    .gpubin/gpumem replay --driver cuda --timeline "$logs/timeline_${t}_gpuscope.csv" cmd/gpumem/testdata/$t.csv.gz >/dev/null 2>&1
    python3 scripts/measure/torch_timeline.py cmd/gpumem/testdata/$t.csv.gz >"$logs/timeline_${t}_native.csv" 2>&1
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 scripts/measure/torch_timeline.py cmd/gpumem/testdata/$t.csv.gz >"$logs/timeline_${t}_expandable.csv" 2>&1
  fi
  ls -la "$logs"
  ;;
*)
  echo "usage: $0 build | run LOGDIR [SECTION...]" >&2
  exit 64
  ;;
esac
