#!/usr/bin/env bash
# pinned.sh measures page-locked host memory on a GPU, gpuscope against
# PyTorch's caching host allocator called from C++ (torch_pinned.cpp), in
# one run: the AllocHost+Free pair at five sizes and a host-to-device copy
# of 64 MiB through page-locked staging chunks (gpu/hostcache_test.go's
# BenchmarkAllocHostFree and BenchmarkPinnedStaging, and the harness's
# lines of the same names).
#
#   scripts/measure/pinned.sh build      the gpu package's test binary with
#                                        CUDA support, into $PINNED_BIN
#                                        (default .dev-pinned/gpu.test); needs Go
#   scripts/measure/pinned.sh run DIR    on the GPU machine: builds the
#                                        harness against the PyTorch wheel and
#                                        the CUDA toolkit it finds, runs both
#                                        (COUNT rounds each, default 5) and
#                                        writes gpuscope.txt, torch.txt,
#                                        machine.txt and summary.txt (medians)
#                                        into DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${PINNED_BIN:-.dev-pinned/gpu.test}
count=${COUNT:-5}

build_torch() {
  local out=$1 torch cuda abi std
  torch=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  cuda=${CUDA_HOME:-$(ls -d /usr/local/cuda*/ 2>/dev/null | head -1)}
  for std in c++20 c++17; do
    if g++ -O2 -std=$std -D_GLIBCXX_USE_CXX11_ABI="$abi" -I"$torch/include" -I"$cuda/include" \
      "$here/torch_pinned.cpp" -o "$out" -L"$torch/lib" -Wl,--no-as-needed -ltorch_cuda -ltorch_cpu \
      -lc10_cuda -lc10 -Wl,--as-needed -L"$cuda/lib64" -lcudart \
      -Wl,-rpath,"$torch/lib" -Wl,-rpath,"$cuda/lib64"; then
      return 0
    fi
  done
  return 1
}

case ${1:-} in
build)
  root=$(cd "$here/../.." && pwd)
  cd "$root"
  eval "$(scripts/cuda-sdk.sh)"
  go test -c -tags cuda -o "$bin" ./gpu
  ;;
run)
  dir=${2:?usage: pinned.sh run DIR}
  mkdir -p "$dir"
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c 'import torch; print("torch", torch.__version__)'
    g++ --version | head -1
    nproc
  } >"$dir/machine.txt" 2>&1
  "$bin" -test.run '^$' -test.bench 'AllocHostFree|PinnedFill|PinnedStaging' -test.benchtime 0.5s \
    -test.count "$count" -test.benchmem >"$dir/gpuscope.txt"
  build_torch "$dir/torch_pinned.bin" 2>"$dir/torch_build.log"
  "$dir/torch_pinned.bin" "$count" >"$dir/torch.txt"
  rm -f "$dir/torch_pinned.bin"
  python3 - "$dir" >"$dir/summary.txt" <<'PY'
import re, statistics, sys
d = sys.argv[1]
def medians(name):
    runs = {}
    for line in open(f"{d}/{name}"):
        m = re.match(r"(Benchmark\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op", line)
        if m:
            runs.setdefault(m.group(1), []).append(float(m.group(3)))
    return {k: statistics.median(v) for k, v in runs.items()}
g, t = medians("gpuscope.txt"), medians("torch.txt")
print(f"{'benchmark':40} {'gpuscope ns':>14} {'PyTorch ns':>14} {'ratio':>7}")
for k in g:
    if k in t:
        print(f"{k:40} {g[k]:14.1f} {t[k]:14.1f} {g[k]/t[k]:7.2f}")
PY
  cat "$dir/summary.txt"
  ;;
*)
  echo "usage: pinned.sh build | run DIR" >&2
  exit 64
  ;;
esac
