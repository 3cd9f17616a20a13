#!/usr/bin/env bash
# sleep-gpu.sh gives issue 46's GPU verdict in one device command: PyTorch's
# weights (10 GiB) in a sleepable scope through libgpuscope, put to sleep
# and woken (sleep_torch.py says what it checks), torch_memory_saver's
# times where it is installed, and compute-sanitizer on a small run; then
# sleep_report.py's verdict, whose last line is VERDICT: PASS (exit 0) or
# FAIL (exit 1).
#
#   scripts/measure/sleep-gpu.sh build              here, with Go: .sleepgpu/ holds
#                                                   libgpuscope.so (-tags cuda) and the
#                                                   commit (about 20 MB: carry it)
#   scripts/measure/sleep-gpu.sh run LOGDIR [OUT]   there, with PyTorch (CuPy, g++ and
#                                                   compute-sanitizer where it has them),
#                                                   no Go; LOGDIR new or empty (one that
#                                                   holds files is refused); with OUT,
#                                                   LOGDIR is packed into
#                                                   OUT/sleep-logs.tgz after every part and
#                                                   report.txt copied there at the end
#
# Each part runs under timeout -k 10 with at most what is left of BUDGET
# (seconds, default 280; the parts take about 150 s on an H100), in the
# background and waited for, so that a TERM or INT stops it at once and
# the report is still written and packed; a part the budget has no room
# for is listed in notrun.txt. SLEEP_TORCH names another script to run in
# sleep_torch.py's place, whose parts need a second each (the harness's
# tests run a stand-in); GIB and CYCLES change the model's size and the
# cycles, CAP_GIB (default 0, none) caps the device first
# (gpuscope.set_max_reserved): under 2.5-32 GiB the scope's pool grows in
# pages, which sleep and wake release and map one by one.
#
# On the device, with .sleepgpu carried:
#
#   scripts/measure/sleep-gpu.sh run /tmp/sleep "$OUT"
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/measure
bin=${SLEEP_BIN:-$root/.sleepgpu}

case "${1:-}" in
build)
  set -e
  cd "$root"
  eval "$(scripts/cuda-sdk.sh)"
  rm -rf "$bin" && mkdir -p "$bin"
  git describe --always --dirty --abbrev=12 >"$bin/commit.txt" 2>/dev/null || echo unknown >"$bin/commit.txt"
  go build -tags cuda -buildmode=c-shared -o "$bin/libgpuscope.so" ./cmd/libgpuscope
  echo "built $bin ($(du -sh "$bin" | cut -f1))"
  exit 0
  ;;
run)
  [ $# -ge 2 ] || { echo "usage: $0 run LOGDIR [OUT]" >&2; exit 64; }
  logs=$2 out=${3:-}
  ;;
*)
  echo "usage: $0 build | run LOGDIR [OUT]" >&2
  exit 64
  ;;
esac

# A LOGDIR that holds files is refused: the parts append to their logs, and
# the report would read an earlier run's lines beside this one's (the
# device keeps /tmp between calls).
if [ -e "$logs" ] && [ -n "$(ls -A "$logs")" ]; then
  echo "sleep-gpu: $logs is not empty: it may hold an earlier run's logs, which the report would read; give a new folder" >&2
  exit 1
fi
mkdir -p "$logs" && logs=$(cd "$logs" && pwd)
script=${SLEEP_TORCH:-$here/sleep_torch.py}
if [ -z "${SLEEP_TORCH:-}" ] && [ ! -f "$bin/libgpuscope.so" ]; then
  echo "sleep-gpu: no $bin/libgpuscope.so: run build first, where Go is" >&2
  exit 1
fi
export GPUSCOPE_LIB=$bin/libgpuscope.so GPUSCOPE_BUILD_DIR=$bin PYTHONUNBUFFERED=1
export PYTHONPATH=$root/cmd/libgpuscope/python${PYTHONPATH:+:$PYTHONPATH}
budget=${BUDGET:-280}
gib=${GIB:-10} cycles=${CYCLES:-20} cap=${CAP_GIB:-0}
start=$SECONDS
running= # the part running now: its pid and name

pack=sleep-logs.tgz report=$here/sleep_report.py run=run
# shellcheck source=parts.sh
. "$here/parts.sh" # save, stop, finish

# part NAME NEED CMD...: runs CMD, its output appended to LOGDIR/NAME and
# its errors to NAME.err, for at most what is left of the budget; where
# less than NEED seconds are left, it is listed in notrun.txt instead.
part() {
  local name=$1 need=$2 left rc t0
  shift 2
  [ -z "${SLEEP_TORCH:-}" ] || need=1 # a stand-in's parts take a moment
  left=$((budget - (SECONDS - start)))
  if [ "$left" -lt "$need" ]; then
    echo "$name: $left s of the budget left, it needs about $need: $*" >>"$logs/notrun.txt"
    return 0
  fi
  t0=$SECONDS
  timeout -k 10 "$left" "$@" >>"$logs/$name" 2>>"$logs/$name.err" &
  running="$! $name"
  wait "${running%% *}"
  rc=$?
  running=
  echo "== $name [rc $rc, $((SECONDS - t0)) s, of $left s left]: $*" >>"$logs/commands.txt"
  if [ $rc -ne 0 ]; then
    echo "$name exited $rc after $((SECONDS - t0)) s$([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo ", at the budget's end"): $*" >>"$logs/failures.txt"
  fi
  save
}

trap 'stop TERM; exit 143' TERM
trap 'stop INT; exit 130' INT

t() { timeout -k 5 30 "$@"; }
{
  echo "commit $(cat "$bin/commit.txt" 2>/dev/null || echo unknown)"
  date -u
  t nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "BUDGET=$budget GIB=$gib CYCLES=$cycles CAP_GIB=$cap"
  ! command -v compute-sanitizer >/dev/null || t compute-sanitizer --version | tail -1
} >"$logs/machine.txt" 2>&1

# The PyTorch shim (use_torch's), compiled once into the build folder: the
# parts after it load it from there.
if [ -z "${SLEEP_TORCH:-}" ]; then
  part shim.txt 40 python3 -c 'import gpuscope; print(gpuscope._build_shim())'
fi
part gpuscope.jsonl 90 python3 "$script" gpuscope --gib "$gib" --cycles "$cycles" --cap-gib "$cap"
part tms.jsonl 5 python3 "$script" tms --gib "$gib" --cycles "$cycles"
if command -v compute-sanitizer >/dev/null || [ -n "${SLEEP_TORCH:-}" ]; then
  sanitizer=(compute-sanitizer --tool memcheck --error-exitcode 9)
  [ -z "${SLEEP_TORCH:-}" ] || sanitizer=()
  part sanitizer.txt 60 "${sanitizer[@]}" python3 "$script" gpuscope --small
else
  echo "compute-sanitizer: not on this machine" >>"$logs/notrun.txt"
fi
finish
exit $verdict
