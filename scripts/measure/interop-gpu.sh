#!/usr/bin/env bash
# interop-gpu.sh measures gpuscope's C allocator under real clients on a GPU,
# in one run (docs/interop.md): PyTorch training and CuPy's matrix products
# and FFTs against their own allocators, both frameworks on one pool under one
# cap, cuBLAS GEMMs whose workspace is a scope's (examples/cublas), the cost
# of an allocation + free from C++ and from Python, and compute-sanitizer on a
# short PyTorch run.
#
#   scripts/measure/interop-gpu.sh build        here, with Go: .interop/ holds
#                                               libgpuscope.so (-tags cuda), the
#                                               cublas example and its test binary
#   scripts/measure/interop-gpu.sh run LOGDIR   there, with PyTorch, CuPy and the
#                                               CUDA toolkit, no Go: builds the C++
#                                               twin and the minimal allocator, runs
#                                               everything, writes LOGDIR/report.txt
#
# PROCS (default 3) sets how many processes of each mode the timed parts run,
# taking turns; QUICK=1 makes every part short, to check the harness. Each part
# runs under a time limit and the run goes on when one fails; the report says
# what is missing.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/measure
bin=$root/.interop

case "${1:-}" in
build)
  set -e
  cd "$root"
  eval "$(scripts/cuda-sdk.sh)"
  rm -rf "$bin" && mkdir -p "$bin"
  git describe --always --dirty --abbrev=12 >"$bin/commit.txt" 2>/dev/null || echo unknown >"$bin/commit.txt"
  go build -tags cuda -buildmode=c-shared -o "$bin/libgpuscope.so" ./cmd/libgpuscope
  go build -tags cuda -o "$bin/cublas" ./examples/cublas
  go test -c -tags cuda -o "$bin/cublas.test" ./examples/cublas
  echo "built $(ls "$bin" | wc -l) files in $bin ($(du -sh "$bin" | cut -f1))"
  ;;
run)
  [ $# -ge 2 ] || { echo "usage: $0 run LOGDIR" >&2; exit 64; }
  logs=$2
  mkdir -p "$logs" && logs=$(cd "$logs" && pwd)
  [ -f "$bin/libgpuscope.so" ] || { echo "interop-gpu: no $bin/libgpuscope.so: run build first, where Go is" >&2; exit 1; }
  export GPUSCOPE_LIB=$bin/libgpuscope.so PYTHONUNBUFFERED=1
  rounds=${PROCS:-3}
  if [ "${QUICK:-}" = 1 ]; then
    rounds=1 steps=12 warmup=2 ops=16 passes=1
    export N=2000 ROUNDS=2
  else
    steps=60 warmup=10 ops=120 passes=3
  fi
  cuda=${CUDA_HOME:-$(ls -d /usr/local/cuda*/ 2>/dev/null | head -1)}
  {
    echo "commit $(cat "$bin/commit.txt")"
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch, cupy; print("torch", torch.__version__, "cupy", cupy.__version__)'
    nproc
  } >"$logs/machine.txt" 2>&1
  # part NAME LIMIT CMD...: runs CMD with its output appended to LOGDIR/NAME.
  part() {
    local name=$1 limit=$2 rc
    shift 2
    [ "${QUICK:-}" != 1 ] || limit=$((limit < 150 ? limit : 150))
    echo "== $name: $*" >>"$logs/commands.txt"
    timeout "$limit" "$@" >>"$logs/$name" 2>>"$logs/$name.err"
    rc=$?
    [ $rc -eq 0 ] || echo "interop-gpu: $name exited $rc: $*" | tee -a "$logs/failures.txt" >&2
    return 0
  }

  # The C/C++ pieces, against the PyTorch wheel and the toolkit found here.
  torchdir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  gcc -O2 -shared -fPIC -I"$cuda/include" "$here/interop_freelist.c" -o "$bin/interop_freelist.so" \
    -L"$cuda/lib64" -lcudart -Wl,-rpath,"$cuda/lib64" 2>>"$logs/build.err" || echo "interop-gpu: interop_freelist.c did not build" | tee -a "$logs/failures.txt"
  g++ -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$abi" -I"$torchdir/include" -I"$cuda/include" "$here/interop_pair.cpp" \
    -o "$bin/interop_pair" -L"$torchdir/lib" -lc10 -lc10_cuda -L"$cuda/lib64" -lcudart -ldl \
    -Wl,-rpath,"$torchdir/lib" -Wl,-rpath,"$cuda/lib64" 2>>"$logs/build.err" || echo "interop-gpu: interop_pair.cpp did not build" | tee -a "$logs/failures.txt"

  # cuBLAS from Go: the example, and its test as the CUDA suite runs it.
  cublas=$(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.[0-9]+ /{print $NF; exit}')
  [ -n "$cublas" ] || cublas=$(ls "$cuda"/lib64/libcublas.so.* 2>/dev/null | head -1)
  [ -n "$cublas" ] || cublas=$(find "$(python3 -c 'import site; print(site.getsitepackages()[0])')/nvidia" -name 'libcublas.so.*' 2>/dev/null | head -1)
  export CUBLAS_LIB=$cublas
  part cublas.txt 120 "$bin/cublas"
  part cublas_test.txt 120 bash -c "cd '$root/examples/cublas' && '$bin/cublas.test' -test.v -test.count=1"

  # PyTorch: each mode a process of its own, the modes taking turns.
  for ((r = 0; r < rounds; r++)); do
    part torch.jsonl 300 env -u PYTORCH_CUDA_ALLOC_CONF python3 "$here/interop_torch.py" native --steps $steps --warmup $warmup
    part torch.jsonl 300 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$here/interop_torch.py" expandable --steps $steps --warmup $warmup
    part torch.jsonl 300 env -u PYTORCH_CUDA_ALLOC_CONF python3 "$here/interop_torch.py" gpuscope --steps $steps --warmup $warmup
  done
  # CuPy, likewise.
  for ((r = 0; r < rounds; r++)); do
    part cupy.jsonl 300 python3 "$here/interop_cupy.py" pool --ops $ops --passes $passes
    part cupy.jsonl 300 python3 "$here/interop_cupy.py" gpuscope --ops $ops --passes $passes
  done
  part both.txt 300 python3 "$here/interop_both.py" $((8 << 30))
  # record_stream through the compiled hook, and the control without it.
  part streams.jsonl 300 env GPUSCOPE_BUILD_DIR="$bin" python3 "$here/interop_streams.py" wired
  part streams.jsonl 120 python3 "$here/interop_streams.py" unwired
  # The cost of a pair: from C++, all three in one process; from Python, a
  # process per mode, taking turns.
  part pair.jsonl 300 "$bin/interop_pair" "$GPUSCOPE_LIB" "$bin/interop_freelist.so"
  # libgpuscope's own C benchmark, where the tree has it: the same pair,
  # and the empty crossing into Go.
  if [ -f "$root/cmd/libgpuscope/testdata/pair_bench.c" ] &&
    gcc -O2 -I"$root/cmd/libgpuscope" "$root/cmd/libgpuscope/testdata/pair_bench.c" -o "$bin/pair_bench" \
      -L"$bin" -lgpuscope -Wl,-rpath,"$bin" 2>>"$logs/build.err"; then
    for size in 256 $((1 << 20)) $((64 << 20)); do
      part pair_bench.txt 120 "$bin/pair_bench" 1000000 $size 0
    done
  fi
  for ((r = 0; r < rounds; r++)); do
    part pyalloc.jsonl 300 env -u PYTORCH_CUDA_ALLOC_CONF python3 "$here/interop_pyalloc.py" native
    part pyalloc.jsonl 300 python3 "$here/interop_pyalloc.py" freelist "$bin/interop_freelist.so"
    part pyalloc.jsonl 300 python3 "$here/interop_pyalloc.py" gpuscope
  done
  # compute-sanitizer on a short PyTorch run through gpuscope.
  part sanitizer.txt 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 "$here/interop_torch.py" gpuscope --small --steps 4 --warmup 1
  python3 "$here/interop_report.py" "$logs" | tee "$logs/report.txt"
  ;;
*)
  echo "usage: $0 build | run LOGDIR" >&2
  exit 64
  ;;
esac
