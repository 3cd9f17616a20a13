#!/usr/bin/env bash
# gpu-test.sh builds here and runs there: the CUDA test binaries of the
# packages that test something on the GPU.
#
#   scripts/gpu-test.sh build          # on any machine with Go: cuda.h and the
#                                      # stub libcuda come from scripts/cuda-sdk.sh
#   scripts/gpu-test.sh run [LOGDIR]   # on the GPU machine, from the repository root
#
# build writes .gpubin/: the commit (commit.txt), one test binary per such
# package (PKG.test.gz), the gpumem and kernel commands, gzipped so that a
# device run can carry them (about 27 MB; one log each),
# and a list of which directory each test runs in. run needs no Go: it
# unpacks them, runs each test binary in its package directory and prints
# a go-test-style summary. Where there is no GPU it says so and exits 2: the
# tests were not run, which is not a pass.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=.gpubin

case "${1:-}" in
build)
  set -e
  eval "$(scripts/cuda-sdk.sh)"
  rm -rf "$bin" && mkdir -p "$bin"
  : >"$bin/tests.txt"
  # The commit the binaries come from, with -dirty where the tree had
  # changes, so that every log of a run says what it tested.
  git describe --always --dirty --abbrev=12 >"$bin/commit.txt" 2>/dev/null || echo unknown >"$bin/commit.txt"
  # The packages with files of their own for the GPU (a cuda build
  # constraint), and those whose tests open the C allocator's devices,
  # which are GPUs with -tags cuda (cmd/libgpuscope/internal/foreign's openDevice),
  # test something there: the others run the host device's tests that CI
  # runs, and all 39 binaries (97 MB) are more than a device run carries.
  # (cmd/libgpuscope's tests build the library with the go command, which
  # the GPU machine lacks; internal/cthreads makes the same C calls.)
  files='{{join .GoFiles " "}} {{join .CgoFiles " "}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}'
  also=" cmd/libgpuscope/internal/foreign gpu/capi cmd/libgpuscope/internal/cthreads "
  for pkg in $(go list -tags cuda ./...); do
    dir=$(go list -tags cuda -f '{{.Dir}}' "$pkg")
    name=$(echo "${pkg#github.com/gpuscope/gpuscope/}" | tr / _)
    if [ "$(go list -tags cuda -f "$files" "$pkg")" = "$(go list -f "$files" "$pkg" 2>/dev/null)" ] &&
      [[ "$also" != *" ${pkg#github.com/gpuscope/gpuscope/} "* ]]; then
      continue
    fi
    if [ -n "$(go list -tags cuda -f '{{join .TestGoFiles ""}}{{join .XTestGoFiles ""}}' "$pkg")" ]; then
      go test -c -tags cuda -ldflags='-s -w' -o "$bin/$name.test" "$pkg"
      echo "$name.test ${dir#$root/}" >>"$bin/tests.txt"
    fi
  done
  go build -tags cuda -ldflags='-s -w' -o "$bin/gpumem" ./cmd/gpumem
  go build -tags cuda -ldflags='-s -w' -o "$bin/kernel" ./examples/kernel
  # Compressed, the folder stays well under what a device run can carry.
  gzip -9 "$bin"/*.test "$bin/gpumem" "$bin/kernel"
  echo "built $(wc -l <"$bin/tests.txt") test binaries in $bin/ ($(du -sh "$bin" | cut -f1), gzip)"
  ;;
run)
  logs=${2:-$bin/logs}
  mkdir -p "$logs"
  logs=$(cd "$logs" && pwd)
  if ! ldconfig -p 2>/dev/null | grep 'libcuda.so.1' >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-test: no NVIDIA driver or GPU on this machine: the CUDA tests were NOT run" >&2
    exit 2
  fi
  for z in "$bin"/*.gz; do
    [ -e "$z" ] && gunzip -f "$z" && chmod +x "${z%.gz}"
  done
  echo "commit $(cat "$bin/commit.txt" 2>/dev/null || echo unknown)"
  pass=0 fail=0
  while read -r test dir; do
    if (cd "$dir" && "$root/$bin/$test" -test.v -test.count=1 >"$logs/$test.log" 2>&1 </dev/null); then
      pass=$((pass + 1)); echo "ok   $test ($dir) $(grep -c '^--- PASS' "$logs/$test.log") passed, $(grep -c '^--- SKIP' "$logs/$test.log") skipped"
    else
      fail=$((fail + 1)); echo "FAIL $test ($dir)"; tail -40 "$logs/$test.log"
    fi
  done <"$bin/tests.txt"
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
  ;;
*)
  echo "usage: $0 build | run [LOGDIR]" >&2
  exit 64
  ;;
esac
