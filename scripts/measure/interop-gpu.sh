#!/usr/bin/env bash
# interop-gpu.sh measures gpuscope's C allocator under real clients on a GPU,
# in one command (docs/interop.md): record_stream through PyTorch's hook,
# onto a side stream and onto the default one, each with its control; a
# server of four threads, each request in a scope of its own; PyTorch's
# hooks (empty_cache, the memory fraction, graph capture refused); out of
# memory raised in both frameworks on one pool under one cap, the process
# going on after; PyTorch training and CuPy's matrix products and FFTs
# against their own allocators; the cost of an allocation + free from C++
# and from Python, PyTorch's and CuPy's (issue 47); cuBLAS GEMMs whose workspace is a scope's
# (examples/cublas); and compute-sanitizer on a short PyTorch run.
#
#   scripts/measure/interop-gpu.sh build              here, with Go: .interop/ holds
#                                                     libgpuscope.so (-tags cuda), the
#                                                     cublas example and its test binary
#   scripts/measure/interop-gpu.sh run LOGDIR [OUT]   there, with PyTorch, CuPy and the
#                                                     CUDA toolkit, no Go (LOGDIR new or
#                                                     empty): builds the C++
#                                                     twin and the minimal allocator, runs
#                                                     the batch, writes LOGDIR/report.txt,
#                                                     whose last line is the verdict (PASS,
#                                                     exit 0; FAIL, exit 1);
#                                                     with OUT, packs LOGDIR into
#                                                     OUT/interop-logs.tgz after every
#                                                     part and copies report.txt there
#                                                     at the end (two files)
#   scripts/measure/interop-gpu.sh plan               anywhere: the batch's parts in order,
#                                                     with what each may take, run nothing
#
# The batch fits one command of the device's (10 minutes): it runs its parts
# in the order of what must be shown first, each under a time limit that
# ends at the budget's end at the latest (BUDGET seconds, default 550; a
# part still running 10 s after its limit is killed), and starts none that
# the budget has no room for: the rounds of the timed parts leave room for
# the parts after them (compute-sanitizer, both frameworks, cuBLAS, a
# round of CuPy). A part that fails or is skipped is listed in failures.txt
# or skipped.txt, and the report says what is missing. commands.txt gives
# every part's exit status, seconds, estimate and limit, to budget the next
# run by. With OUT, the logs are packed there after every part, so that a
# command the device ends early still brings back all that ran.
#
# PROCS (default 3) sets how many processes of each mode the timed parts
# run (CuPy's, CUPY_PROCS, default 2); the modes take turns in rounds, each round in another order, so that
# the machine's drift falls on every mode alike. QUICK=1 makes every part
# short, to check the harness. PARTS (default all) picks parts by name:
# streams server hooks both torch pair pyalloc cupy cublas sanitizer. Every
# part that runs PyTorch through gpuscope uses use_torch's shim, compiled
# once, first, into the build folder (shim.txt says how it went).
#
# On the device, with .interop carried (the CUDA suite is a command of its
# own, scripts/gpu-test.sh run, with .gpubin carried):
#
#   scripts/measure/interop-gpu.sh run /tmp/interop "$OUT"
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/measure
bin=${INTEROP_BIN:-$root/.interop} # another folder for the harness's own test

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
  exit 0
  ;;
run)
  [ $# -ge 2 ] || { echo "usage: $0 run LOGDIR [OUT]" >&2; exit 64; }
  dry=0 logs=$2 out=${3:-}
  ;;
plan)
  dry=1 logs=$(mktemp -d) out=
  trap 'rm -rf "$logs"' EXIT
  ;;
*)
  echo "usage: $0 build | run LOGDIR [OUT] | plan" >&2
  exit 64
  ;;
esac

# A LOGDIR that holds files is refused: the parts append to their logs, and
# the report would read an earlier run's lines beside this one's (the
# device keeps /tmp between calls).
if [ -e "$logs" ] && [ -n "$(ls -A "$logs")" ]; then
  echo "interop-gpu: $logs is not empty: it may hold an earlier run's logs, which the report would read; give a new folder" >&2
  exit 1
fi
mkdir -p "$logs" && logs=$(cd "$logs" && pwd)
if [ $dry = 0 ] && [ ! -f "$bin/libgpuscope.so" ]; then
  echo "interop-gpu: no $bin/libgpuscope.so: run build first, where Go is" >&2
  exit 1
fi
export GPUSCOPE_LIB=$bin/libgpuscope.so PYTHONUNBUFFERED=1 GPUSCOPE_BUILD_DIR=$bin
rounds=${PROCS:-3}
crounds=${CUPY_PROCS:-$((rounds < 2 ? rounds : 2))} # CuPy's rounds: two fit the budget beside the rest
budget=${BUDGET:-550}
# after: the seconds that may follow the budget's end: the last part's kill
# 10 s after its limit, the report and the packing. The budget and these
# fit the device's command of 600 s.
after=30
parts=" ${PARTS:-streams server hooks both torch pair pyalloc cupy cublas sanitizer} "
if [ "${QUICK:-}" = 1 ]; then
  rounds=1 steps=12 warmup=2 ops=16 passes=1
  export N=2000 ROUNDS=2
else
  steps=60 warmup=10 ops=120 passes=3
fi
cuda=${CUDA_HOME:-$(ls -d /usr/local/cuda*/ 2>/dev/null | head -1)}
start=$SECONDS
spent=0 # seconds of the budget used; in a plan, the parts' estimates

# want NAME: whether PARTS names the part.
want() { [[ $parts == *" $1 "* ]]; }

# fits SECONDS WHAT: whether the budget has room for SECONDS more; where
# it has not, WHAT is listed as skipped.
fits() {
  local left
  [ $dry = 1 ] || spent=$((SECONDS - start))
  left=$((budget - spent))
  [ "$left" -ge "$1" ] && return 0
  echo "== $2 [skipped: $left s of the budget left, it needs about $1]" >>"$logs/commands.txt"
  echo "$2: skipped, $left s of the budget left, it needs about $1" >>"$logs/skipped.txt"
  echo "interop-gpu: skipped $2: $left s of the budget left" >&2
  [ $dry = 0 ] || printf '%5d s  %s: SKIPPED, %d s left\n' "$spent" "$2" "$left"
  return 1
}

# part NAME NEED LIMIT CMD...: runs CMD with its output appended to
# LOGDIR/NAME (stderr to NAME.err), for at most LIMIT seconds and never
# past the budget; it is skipped where less than NEED seconds, what it
# usually takes, are left.
part() {
  local name=$1 need=$2 limit=$3 rc t0 secs
  shift 3
  fits "$need" "$name: $*" || return 0
  [ "${QUICK:-}" != 1 ] || limit=$((limit < 150 ? limit : 150))
  limit=$((limit < budget - spent ? limit : budget - spent))
  if [ $dry = 1 ]; then
    printf '%5d s  %-14s about %3d s, at most %3d s: %s\n' "$spent" "$name" "$need" "$limit" "$*"
    spent=$((spent + need))
    return 0
  fi
  t0=$(date +%s.%N)
  # In the background and waited for, so that a TERM to the batch is
  # handled at once (bash runs a trap only once a foreground command ends).
  timeout -k 10 "$limit" "$@" >>"$logs/$name" 2>>"$logs/$name.err" &
  running="$! $name: $*"
  wait "${running%% *}"
  rc=$?
  running=
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "== $name [rc $rc, $secs s; estimate $need s, limit $limit s]: $*" >>"$logs/commands.txt"
  if [ $rc -ne 0 ]; then
    echo "$name: exited $rc after $secs s$([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo ", at its limit of $limit s"): $*" >>"$logs/failures.txt"
    echo "interop-gpu: $name exited $rc: $*" >&2
  fi
  save
  return 0
}

pack=interop-logs.tgz report=$here/interop_report.py run=batch
# shellcheck source=parts.sh
. "$here/parts.sh" # save, stop, finish

# reserve: what the parts after the timed rounds need at least, which a
# round leaves room for: compute-sanitizer, cuBLAS and one round of CuPy,
# as far as PARTS names them.
reserve=0
! want sanitizer || reserve=$((reserve + 60))
! want cublas || reserve=$((reserve + 6))
! want cupy || reserve=$((reserve + 24))

if [ $dry = 1 ]; then
  torchdir=TORCH abi=ABI
  echo "budget $budget s, PROCS=$rounds; parts in order (start, name, estimate, limit):"
else
  running= # the part running now, its pid and what it runs: a TERM or INT stops it, then finishes
  trap 'stop TERM; exit 143' TERM
  trap 'stop INT; exit 130' INT
  # Each under a time limit too: a command that hangs here would take the
  # whole budget.
  t() { timeout -k 5 30 "$@"; }
  {
    echo "commit $(cat "$bin/commit.txt")"
    date -u
    t nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    t python3 -c 'import torch, cupy; print("torch", torch.__version__, "cupy", cupy.__version__)'
    nproc
    echo "PROCS=$rounds BUDGET=$budget QUICK=${QUICK:-} PARTS=$parts"
    # use_cupy compiles its allocation function against Python's headers.
    t python3 -c 'import os, sysconfig; h = os.path.join(sysconfig.get_paths()["include"], "Python.h"); print(h, "exists" if os.path.exists(h) else "is missing")'

    echo "CUDA folder (CUDA_HOME, else the first /usr/local/cuda*): ${cuda:-none}"
    [ ! -x "$cuda/bin/nvcc" ] || t "$cuda/bin/nvcc" --version | tail -2
    ! command -v compute-sanitizer || t compute-sanitizer --version | tail -1
  } >"$logs/machine.txt" 2>&1
  echo "$parts" >"$logs/parts.txt" # the report reads the targets of these parts alone
  torchdir=$(t python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  abi=$(t python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
fi

# 0. The PyTorch shim (torch_shim.cpp), compiled against this PyTorch once,
# for every part that runs PyTorch through gpuscope: its compiler's errors,
# if any, are in shim.txt.err, and every such part then runs without it.
if want streams || want server || want hooks || want both || want torch || want pyalloc || want sanitizer; then
  part shim.txt 40 180 env PYTHONPATH="$root/cmd/libgpuscope/python" python3 -c \
    'import gpuscope, torch; print(gpuscope._build_shim())'
fi

# 1. What the last run never showed, first. record_stream through the
# shim's hook, onto a side stream and onto the default stream (FSDP's
# pattern, which gpuscope dropped), each with its control (use_torch's
# wrapper alone: record_stream does nothing, and the late write must land);
# the server of four threads (each request's bytes in its own scope);
# PyTorch's hooks; out of memory raised in both frameworks under one cap.
if want streams; then
  for onto in side default; do
    part streams.jsonl 12 90 python3 "$here/interop_streams.py" wired --onto $onto
    part streams.jsonl 12 90 python3 "$here/interop_streams.py" unwired --onto $onto
  done
fi
if want server; then
  part server.jsonl 25 120 python3 "$here/interop_server.py" torch --rounds $([ "${QUICK:-}" = 1 ] && echo 2 || echo 6)
fi
if want hooks; then
  part hooks.jsonl 12 90 python3 "$here/interop_hooks.py"
fi
if want both; then
  part both.txt 12 120 python3 "$here/interop_both.py" $((2 << 30))
fi

# 2. The cost of a pair from C/C++: the C++ twin (c10, gpuscope and the
# minimal allocator in one process) and libgpuscope's own C benchmark.
if want pair || want pyalloc || want cupy; then
  part build.txt 2 60 gcc -O2 -shared -fPIC -I"$cuda/include" "$here/interop_freelist.c" -o "$bin/interop_freelist.so" \
    -L"$cuda/lib64" -lcudart -Wl,-rpath,"$cuda/lib64"
fi
if want pair; then
  part build.txt 20 120 g++ -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$abi" -I"$torchdir/include" -I"$cuda/include" \
    "$here/interop_pair.cpp" -o "$bin/interop_pair" -L"$torchdir/lib" -lc10 -lc10_cuda -L"$cuda/lib64" -lcudart -ldl \
    -Wl,-rpath,"$torchdir/lib" -Wl,-rpath,"$cuda/lib64"
  part build.txt 2 60 gcc -O2 -I"$root/cmd/libgpuscope" "$root/cmd/libgpuscope/testdata/pair_bench.c" -o "$bin/pair_bench" \
    -L"$bin" -lgpuscope -Wl,-rpath,"$bin"
  part pair.jsonl 10 120 "$bin/interop_pair" "$GPUSCOPE_LIB" "$bin/interop_freelist.so"
  # The pair its pair cache serves (interop_pair's gpuscope-go row has it
  # through Go).
  for size in 256 $((1 << 20)) $((64 << 20)); do
    part pair_bench.txt 3 60 "$bin/pair_bench" 200000 $size 0
  done
fi

# 3. In rounds, each mode a process of its own and each round in another
# order: PyTorch's step time (the same steps, the warm-up untimed), then
# the pair from Python. A round starts only where the budget has room for
# all of it, so that where the budget runs short every mode has as many
# processes, and the training as many rounds as the pair.
tmodes=(native expandable gpuscope) pmodes=(native freelist gpuscope)
for ((r = 0; r < rounds; r++)); do
  if want torch; then
    fits $((60 + reserve)) "torch.jsonl: round $r of $rounds" || break
    for ((k = 0; k < 3; k++)); do
      m=${tmodes[(r + k) % 3]}
      case $m in
      expandable) conf=(env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) ;;
      *) conf=(env -u PYTORCH_CUDA_ALLOC_CONF) ;;
      esac
      part torch.jsonl 20 180 "${conf[@]}" python3 "$here/interop_torch.py" "$m" --steps $steps --warmup $warmup --round $r
    done
  fi
  if want pyalloc; then
    fits $((24 + reserve)) "pyalloc.jsonl: round $r of $rounds" || break
    for ((k = 0; k < 3; k++)); do
      case ${pmodes[(r + k) % 3]} in
      native) part pyalloc.jsonl 8 120 env -u PYTORCH_CUDA_ALLOC_CONF python3 "$here/interop_pyalloc.py" native ;;
      freelist) part pyalloc.jsonl 8 120 python3 "$here/interop_pyalloc.py" freelist "$bin/interop_freelist.so" ;;
      gpuscope) part pyalloc.jsonl 8 120 python3 "$here/interop_pyalloc.py" gpuscope ;;
      esac
    done
  fi
done

# 4. What the last run showed already, its library since changed:
# compute-sanitizer on a short PyTorch run, cuBLAS from Go, then CuPy
# against its pool in rounds as far as the budget goes.
if want sanitizer; then
  part sanitizer.txt 60 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 "$here/interop_torch.py" gpuscope --small --steps 4 --warmup 1
fi
if want cublas; then
  cublas=$(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.[0-9]+ /{print $NF; exit}')
  [ -n "$cublas" ] || cublas=$(ls "$cuda"/lib64/libcublas.so.* 2>/dev/null | head -1)
  [ -n "$cublas" ] || [ $dry = 1 ] || cublas=$(find "$(python3 -c 'import site; print(site.getsitepackages()[0])')/nvidia" -name 'libcublas.so.*' 2>/dev/null | head -1)
  export CUBLAS_LIB=$cublas
  part cublas.txt 3 60 "$bin/cublas"
  part cublas_test.txt 3 60 bash -c "cd '$root/examples/cublas' && '$bin/cublas.test' -test.v -test.count=1"
fi
if want cupy; then
  # CuPy's pair (issue 47): gpuscope, gpuscope without use_cupy's check of
  # the pointer, the free list in CuPy's form and CuPy's pool taking turns
  # in one process.
  part cupy_pair.jsonl 14 90 python3 "$here/interop_cupy.py" pair "$bin/interop_freelist.so"
  for ((r = 0; r < crounds; r++)); do
    fits 16 "cupy.jsonl: round $r of $crounds" || break
    for m in $([ $((r % 2)) = 0 ] && echo pool gpuscope || echo gpuscope pool); do
      part cupy.jsonl 8 120 python3 "$here/interop_cupy.py" "$m" --ops $ops --passes $passes --round $r
    done
  done
fi

if [ $dry = 1 ]; then
  echo "about $spent s of $budget, $after s for what follows a part's limit (its kill 10 s after, the report, the packing): $((budget + after)) s of the device's 600"
  exit 0
fi
finish
exit $verdict
