#!/usr/bin/env bash
# pool-gpu.sh measures the pool on a GPU machine against PyTorch's caching
# allocator, in one run. Sections (all by default):
#   suite     every package's CUDA tests
#   calls     what each driver call costs (sim.H200's model comes from it)
#   replays   every shared trace through the pool, unconstrained, 3 runs of
#             --repeat 3 (first pass, then passes on a warm cache)
#   cpp       the same traces through PyTorch's allocator from C++, native
#             and expandable, 3 runs (shared/tools/torch_replay_cpp.sh)
#   pressure  the smallest cap each trace runs under: gpuscope (bisecting
#             --max-reserved on the GPU) and PyTorch native and expandable
#             (shared/tools/torch_min_capacity.py), with the time at each;
#             and resnet50_train's time against its cap
#   steps     the GrowthStep curve (--repeat 3 per step)
#   peers     PyTorch from Python (native, expandable), 3 runs each
#   timeline  the reserved-memory timelines of llama_prefill_dynamic
# docs/pool.md reports it; scripts/pool_report.py makes its tables and plots.
#
#   here:  scripts/pool-gpu.sh build                   # scripts/gpu-test.sh build, and the peers' scripts
#   there: scripts/pool-gpu.sh run LOGDIR [SECTION...] # needs the NVIDIA driver and PyTorch
#
# The peers' scripts come from shared/tools, copied into .peers/ (ignored)
# by build, since a device run carries only the repository.
#
# gpumem replay writes its JSON to stdout and notes to stderr, kept apart
# (replay_stderr.txt); it exits with status 3 where allocations ran out of
# memory, which this script, without set -e, takes as a result ("ooms").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
traces="mlp_train resnet50_train vit_infer_dynamic llama_prefill_dynamic"
steps="0 4194304 20971520 67108864 268435456"

case "${1:-}" in
build)
  set -e
  scripts/gpu-test.sh build
  mkdir -p .peers
  cp ../shared/tools/torch_replay.py ../shared/tools/cupy_replay.py ../shared/tools/torch_min_capacity.py \
    ../shared/tools/torch_replay_cpp.sh ../shared/tools/torch_replay_cpp.cpp .peers/
  if [ -n "$(git status --porcelain)" ]; then
    echo "pool-gpu: the working tree has changes; the run would not measure a commit" >&2
    exit 1
  fi
  git rev-parse HEAD >.gpubin/commit.txt
  ;;
run)
  logs=${2:?usage: $0 run LOGDIR [SECTION...]}
  shift 2
  sections=${*:-suite calls replays cpp pressure steps peers timeline}
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
      for i in 1 2 3; do
        .gpubin/gpumem replay --driver cuda --repeat 3 "$f" >"$logs/replay_${t}_default$i.json" 2>>"$logs/replay_stderr.txt"
      done
    fi
    if has steps; then
      for s in $steps; do
        .gpubin/gpumem replay --driver cuda --repeat 3 --growth-step "$s" "$f" >"$logs/replay_${t}_step$s.json" 2>>"$logs/replay_stderr.txt"
      done
    fi
    if has peers; then
      for i in 1 2 3; do
        python3 .peers/torch_replay.py "$f" >"$logs/torch_${t}_native$i.json" 2>&1
        PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 .peers/torch_replay.py "$f" >"$logs/torch_${t}_expandable$i.json" 2>&1
      done
    fi
  done
  if has cpp; then
    # One build, each trace three times (native, then expandable, each time).
    # shellcheck disable=SC2086
    bash .peers/torch_replay_cpp.sh $files $files $files >"$logs/torch_cpp.jsonl" 2>&1
  fi
  if has pressure; then
    # shellcheck disable=SC2086
    python3 scripts/smallest_device.py --driver cuda --flag max-reserved .gpubin/gpumem $files \
      >"$logs/smallest_gpuscope.jsonl" 2>>"$logs/replay_stderr.txt"
    # shellcheck disable=SC2086
    python3 .peers/torch_min_capacity.py $files >"$logs/smallest_torch_native.jsonl" 2>&1
    # shellcheck disable=SC2086
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 .peers/torch_min_capacity.py $files \
      >"$logs/smallest_torch_expandable.jsonl" 2>&1
    python3 scripts/smallest_device.py --driver cuda --flag max-reserved \
      --curve 1.0086,1.009,1.01,1.0125,1.015,1.02,1.03,1.05,1.1,0 .gpubin/gpumem \
      cmd/gpumem/testdata/resnet50_train.csv.gz >"$logs/curve_resnet50_train.jsonl" 2>>"$logs/replay_stderr.txt"
  fi
  if has timeline; then
    t=llama_prefill_dynamic
    .gpubin/gpumem replay --driver cuda --timeline "$logs/timeline_${t}_gpuscope.csv" cmd/gpumem/testdata/$t.csv.gz >/dev/null 2>&1
    python3 scripts/torch_timeline.py cmd/gpumem/testdata/$t.csv.gz >"$logs/timeline_${t}_native.csv" 2>&1
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 scripts/torch_timeline.py cmd/gpumem/testdata/$t.csv.gz >"$logs/timeline_${t}_expandable.csv" 2>&1
  fi
  ls -la "$logs"
  ;;
*)
  echo "usage: $0 build | run LOGDIR [SECTION...]" >&2
  exit 64
  ;;
esac
