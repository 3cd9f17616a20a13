#!/usr/bin/env bash
# pool-gpu.sh measures the pool on a GPU machine against PyTorch's caching
# allocator, in one run: driver call costs, every shared trace replayed
# through the pool (default settings and the GrowthStep curve, each with
# --repeat 3) and through PyTorch (native and expandable segments), and the
# reserved-memory timelines of llama_prefill_dynamic. docs/pool.md reports it.
#
#   here:  scripts/pool-gpu.sh build            # .gpubin/gpumem and gpu_cuda.test
#   there: scripts/pool-gpu.sh run LOGDIR       # needs the NVIDIA driver, PyTorch, CuPy
#
# The peers' scripts come from shared/tools, copied into .peers/ (ignored)
# by build, since a device run carries only the repository.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
traces="mlp_train resnet50_train vit_infer_dynamic llama_prefill_dynamic"
steps="0 4194304 10485760 20971520 67108864 268435456"

case "${1:-}" in
build)
  set -e
  eval "$(scripts/cuda-sdk.sh)"
  mkdir -p .gpubin .peers
  go build -tags cuda -ldflags='-s -w' -o .gpubin/gpumem ./cmd/gpumem
  go test -c -tags cuda -ldflags='-s -w' -o .gpubin/gpu_cuda.test ./gpu/cuda
  gzip -9f .gpubin/gpumem .gpubin/gpu_cuda.test
  cp ../shared/tools/torch_replay.py ../shared/tools/cupy_replay.py .peers/
  git rev-parse HEAD >.gpubin/commit
  ;;
run)
  logs=${2:?usage: $0 run LOGDIR}
  mkdir -p "$logs"
  logs=$(cd "$logs" && pwd)
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "pool-gpu: no NVIDIA GPU here: nothing was measured" >&2
    exit 2
  fi
  for z in .gpubin/gpumem.gz .gpubin/gpu_cuda.test.gz; do
    [ -e "$z" ] && gunzip -f "$z"
  done
  chmod +x .gpubin/gpumem .gpubin/gpu_cuda.test
  {
    date -u
    git rev-parse HEAD 2>/dev/null || cat .gpubin/commit 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c 'import torch, cupy; print("torch", torch.__version__, "cupy", cupy.__version__)'
  } >"$logs/machine.txt" 2>&1
  (cd gpu/cuda && "$root/.gpubin/gpu_cuda.test" -test.v -test.count=1) >"$logs/gpu_cuda.test.log" 2>&1
  echo "gpu/cuda tests: exit $?" >>"$logs/machine.txt"
  (cd gpu/cuda && "$root/.gpubin/gpu_cuda.test" -test.run XXX -test.bench DriverCalls \
    -test.benchtime 200x -test.count 3 -test.cpu 1,4,16) >"$logs/driver_calls.txt" 2>&1
  for t in $traces; do
    f=cmd/gpumem/testdata/$t.csv.gz
    for s in $steps; do
      .gpubin/gpumem replay --driver cuda --repeat 3 --growth-step "$s" "$f" >"$logs/replay_${t}_step$s.json" 2>&1
    done
    .gpubin/gpumem replay --driver cuda --repeat 3 "$f" >"$logs/replay_${t}_again.json" 2>&1
    python3 .peers/torch_replay.py "$f" >"$logs/torch_${t}_native.json" 2>&1
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 .peers/torch_replay.py "$f" >"$logs/torch_${t}_expandable.json" 2>&1
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
