#!/usr/bin/env bash
# torch.sh measures PyTorch's CUDA caching allocator on the traces given,
# from C++ (torch_replay.cpp), in both of its modes: native, then
# expandable segments. It needs a GPU, the PyTorch wheel (its headers and
# libc10) and the CUDA toolkit's headers; it builds the replayer on first
# use, into $TORCH_REPLAY_BIN (default $TMPDIR/torch_replay).
#
#   scripts/measure/torch.sh replay TRACE...    one JSON line per trace and mode:
#                                               first_ms, warm_ms, reserved_ratio
#   CAP_BYTES=N scripts/measure/torch.sh replay TRACE...   the same under a cap
#   scripts/measure/torch.sh smallest TRACE...  the smallest cap per trace and mode,
#                                               and a new process's replay at it
#   scripts/measure/torch.sh build              the replayer alone
#
# MODES="native" or MODES="expandable" measures one mode only; PASSES sets
# how many passes a replay makes (the first, then warm ones; default 3).
#
# smallest finds the smallest cap the first pass fits under, as
# smallest_device.py does for the pool. It bisects inside one process
# (torch_replay smallest), then replays the first pass in a new process at
# that cap and, where it runs out of memory there, raises the cap by the
# bisection's step until it fits (at most 20 steps); its line is that
# replay's, with smallest_cap_bytes, ratio (to the peak requested) and
# raised (the steps added) and step_bytes (the step: a millionth of the
# peak requested). Under a cap, a warm pass of the native
# allocator can run out of memory where the first fit: replay says so.
# A replay that runs out of memory exits with 3.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${TORCH_REPLAY_BIN:-${TMPDIR:-/tmp}/torch_replay}
modes=${MODES:-native expandable}

build() {
  local torch cuda abi
  torch=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))') || return 1
  abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))') || return 1
  cuda=${CUDA_HOME:-$(ls -d /usr/local/cuda*/ 2>/dev/null | head -1)}
  g++ -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$abi" -I"$torch/include" -I"$cuda/include" \
    "$here/torch_replay.cpp" -o "$bin" -L"$torch/lib" -lc10 -lc10_cuda -L"$cuda/lib64" -lcudart \
    -Wl,-rpath,"$torch/lib" -Wl,-rpath,"$cuda/lib64"
}

# each runs "$@" once per mode, with PyTorch's setting for that mode, and
# returns the highest status.
each() {
  local m rc status=0
  for m in $modes; do
    case $m in
    native) env -u PYTORCH_CUDA_ALLOC_CONF "$@" ;;
    expandable) PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$@" ;;
    *) echo "torch.sh: unknown mode $m (native, expandable)" >&2; return 64 ;;
    esac
    rc=$?
    [ $rc -gt $status ] && status=$rc
  done
  return $status
}

field() { sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p" <<<"$2"; }

# smallest1 finds one trace's smallest cap in the mode of the environment.
smallest1() {
  local found capb step peak ratio out rc raised=0
  found=$("$bin" smallest "$1") || return 1
  capb=$(field smallest_cap_bytes "$found")
  step=$(field step_bytes "$found")
  peak=$(field peak_requested_bytes "$found")
  for ((;;)); do
    out=$(PASSES=1 CAP_BYTES=$capb "$bin" replay "$1")
    rc=$?
    [ $rc -eq 3 ] && [ $raised -lt 20 ] && { capb=$((capb + step)); raised=$((raised + 1)); continue; }
    [ $rc -ne 0 ] && { echo "$out"; return $rc; }
    break
  done
  ratio=$(awk -v c="$capb" -v p="$peak" 'BEGIN { printf "%.5f", c / p }')
  echo "${out%\}}, \"smallest_cap_bytes\": $capb, \"ratio\": $ratio, \"raised\": $raised, \"step_bytes\": $step, \"bisected_cap_bytes\": $(field smallest_cap_bytes "$found")}"
}

cmd=${1:-}
shift || true
case $cmd in
build) build ;;
smallest1) smallest1 "$1" ;; # one trace, one mode: what smallest runs per mode
replay | smallest)
  [ $# -gt 0 ] || { echo "usage: $0 $cmd TRACE..." >&2; exit 64; }
  [ "$bin" -nt "$here/torch_replay.cpp" ] || build || { echo "torch.sh: the replayer did not build" >&2; exit 1; }
  status=0
  for t in "$@"; do
    if [ "$cmd" = replay ]; then
      each "$bin" replay "$t"
    else
      each bash "$0" smallest1 "$t"
    fi
    rc=$?
    [ $rc -gt $status ] && status=$rc
  done
  exit $status
  ;;
*)
  echo "usage: $0 build | replay TRACE... | smallest TRACE..." >&2
  exit 64
  ;;
esac
