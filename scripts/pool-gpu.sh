#!/usr/bin/env bash
# pool-gpu.sh measures the pool on a GPU machine against PyTorch's caching
# allocator, in one run: every package's CUDA tests, driver call costs,
# every shared trace replayed through the pool (default settings five times,
# and once for each point of the GrowthStep curve, each with --repeat 3) and
# through PyTorch (native and expandable segments, three times each), and
# the reserved-memory timelines of llama_prefill_dynamic. docs/pool.md
# reports it; scripts/pool_report.py makes its tables and plots.
#
#   here:  scripts/pool-gpu.sh build            # scripts/gpu-test.sh build, and the peers' scripts
#   there: scripts/pool-gpu.sh run LOGDIR       # needs the NVIDIA driver and PyTorch
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
  cp ../shared/tools/torch_replay.py ../shared/tools/cupy_replay.py .peers/
  if [ -n "$(git status --porcelain)" ]; then
    echo "pool-gpu: the working tree has changes; the run would not measure a commit" >&2
    exit 1
  fi
  git rev-parse HEAD >.gpubin/commit.txt
  ;;
run)
  logs=${2:?usage: $0 run LOGDIR}
  mkdir -p "$logs"
  logs=$(cd "$logs" && pwd)
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "pool-gpu: no NVIDIA GPU here: nothing was measured" >&2
    exit 2
  fi
  {
    date -u
    echo "commit $(cat .gpubin/commit.txt)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c 'import torch; print("torch", torch.__version__)'
  } >"$logs/machine.txt" 2>&1
  scripts/gpu-test.sh run "$logs/suite" >"$logs/suite.txt" 2>&1
  echo "CUDA tests: exit $? ($(tail -1 "$logs/suite.txt"))" >>"$logs/machine.txt"
  (cd gpu/cuda && "$root/.gpubin/gpu_cuda.test" -test.run XXX -test.bench DriverCalls \
    -test.benchtime 200x -test.count 5) >"$logs/driver_calls.txt" 2>&1
  for t in $traces; do
    f=cmd/gpumem/testdata/$t.csv.gz
    for i in 1 2 3 4 5; do
      .gpubin/gpumem replay --driver cuda --repeat 3 "$f" >"$logs/replay_${t}_default$i.json" 2>>"$logs/replay_stderr.txt"
    done
    for s in $steps; do
      .gpubin/gpumem replay --driver cuda --repeat 3 --growth-step "$s" "$f" >"$logs/replay_${t}_step$s.json" 2>>"$logs/replay_stderr.txt"
    done
    for i in 1 2 3; do
      python3 .peers/torch_replay.py "$f" >"$logs/torch_${t}_native$i.json" 2>&1
      PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 .peers/torch_replay.py "$f" >"$logs/torch_${t}_expandable$i.json" 2>&1
    done
  done
  t=llama_prefill_dynamic
  .gpubin/gpumem replay --driver cuda --timeline "$logs/timeline_${t}_gpuscope.csv" cmd/gpumem/testdata/$t.csv.gz >/dev/null 2>&1
  python3 scripts/torch_timeline.py cmd/gpumem/testdata/$t.csv.gz >"$logs/timeline_${t}_native.csv" 2>&1
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 scripts/torch_timeline.py cmd/gpumem/testdata/$t.csv.gz >"$logs/timeline_${t}_expandable.csv" 2>&1
  ls -la "$logs"
  ;;
*)
  echo "usage: $0 build | run LOGDIR" >&2
  exit 64
  ;;
esac
