#!/usr/bin/env bash
# ab.sh compares HEAD with an earlier commit on a GPU machine, in one run:
# the CUDA suite of HEAD, the replays of the four traces of cmd/gpumem/testdata
# through BASE's pool and HEAD's pool under one harness (BASE's cmd/gpumem,
# and the same compiled against HEAD's packages: "mix"), and the host-CPU hot
# path (pool, scope and gpu benchmarks) of both, in alternated rounds.
#
#   scripts/measure/ab.sh build BASE     here (needs Go): writes .dev-ab/
#   scripts/measure/ab.sh run LOGDIR     there, from the repository root
#                                        (no Go needed); ROUNDS_R (default 9)
#                                        and ROUNDS_H (default 6) set the rounds
#
# Then, here: scripts/measure/ab.sh report LOGDIR prints benchstat's tables.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=.dev-ab

build() {
  local base=$1 tmp
  eval "$(scripts/cuda-sdk.sh)"
  scripts/gpu-test.sh build # the packages with files for the GPU: the others run in CI
  rm -rf "$out" && mkdir -p "$out/bin"
  tmp=$(mktemp -d)
  git worktree add -f "$tmp/base" "$base" >/dev/null
  git worktree add -f "$tmp/mix" HEAD >/dev/null
  (cd "$tmp/base" && go build -tags cuda -ldflags='-s -w' -o "$root/$out/bin/gpumem-before" ./cmd/gpumem)
  # mix: BASE's harness over HEAD's packages. Where HEAD moved what the
  # harness imports, the harness follows (sim moved under internal/,
  # pool.FormatBytes became internal/units.FormatBytes).
  (cd "$tmp/mix" && rm -rf cmd/gpumem && git checkout "$base" -- cmd/gpumem &&
    { grep -rlZ 'gpuscope/pool/sim"' cmd/gpumem || true; } | xargs -0 -r sed -i 's#gpuscope/pool/sim"#gpuscope/internal/sim"#' &&
    if grep -q 'pool\.FormatBytes(' cmd/gpumem/plot.go; then
      sed -i 's#pool\.FormatBytes(#units.FormatBytes(#g; 0,/^import (/s##import (\n\t"github.com/gpuscope/gpuscope/internal/units"#' cmd/gpumem/plot.go
    fi &&
    go build -tags cuda -ldflags='-s -w' -o "$root/$out/bin/gpumem-mix" ./cmd/gpumem)
  for p in pool scope gpu; do
    (cd "$tmp/base/$p" && go test -c -ldflags='-s -w' -o "$root/$out/bin/$p-before.test" .)
    (cd "$root/$p" && go test -c -ldflags='-s -w' -o "$root/$out/bin/$p-head.test" .)
  done
  git worktree remove --force "$tmp/base"; git worktree remove --force "$tmp/mix"; rm -rf "$tmp"
  echo "before $(git rev-parse --short "$base"), head $(git describe --always --dirty --abbrev=7), mix = cmd/gpumem of before on head" >"$out/commits.txt"
  # xz keeps a device call's carry small; python3 unpacks it there.
  for f in .gpubin/*.gz; do gunzip -c "$f" | xz -9 -T2 >"$out/gpubin__$(basename "${f%.gz}").xz"; done
  cp .gpubin/commit.txt .gpubin/tests.txt "$out/"
  for f in "$out"/bin/*; do xz -9 -T2 -c "$f" >"$out/bin__$(basename "$f").xz"; done
  rm -rf "$out/bin"
  du -sh "$out"
}

unpack() {
  python3 - "$out" <<'PY'
import lzma, os, shutil, sys
src = sys.argv[1]
os.makedirs(".gpubin", exist_ok=True); os.makedirs(f"{src}/bin", exist_ok=True)
for name in os.listdir(src):
    if not name.endswith(".xz"):
        continue
    kind, base = name[:-3].split("__", 1)
    dst = ".gpubin" if kind == "gpubin" else f"{src}/bin"
    with lzma.open(os.path.join(src, name)) as i, open(os.path.join(dst, base), "wb") as o:
        shutil.copyfileobj(i, o)
    os.chmod(os.path.join(dst, base), 0o755)
PY
  cp "$out/commit.txt" "$out/tests.txt" .gpubin/
}

run() {
  local L=$1 t0 i v t order
  unpack
  mkdir -p "$L/replays" "$L/hotpath"
  L=$(cd "$L" && pwd)
  cp "$out/commits.txt" "$L/"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$L/machine.txt" 2>&1 || true
  lscpu | grep -E 'Model name|^CPU\(s\)' >>"$L/machine.txt"
  t0=$(date +%s)
  scripts/gpu-test.sh run "$L/suite" >"$L/suite.txt" 2>&1 || true
  echo "suite: $(tail -1 "$L/suite.txt"), $(($(date +%s) - t0)) s" >>"$L/commits.txt"
  t0=$(date +%s)
  for i in $(seq 1 "${ROUNDS_R:-9}"); do
    if [ $((i % 2)) -eq 0 ]; then order="before mix"; else order="mix before"; fi
    for v in $order; do
      for t in mlp_train resnet50_train vit_infer_dynamic llama_prefill_dynamic; do
        "$out/bin/gpumem-$v" replay --driver cuda --repeat 3 "cmd/gpumem/testdata/$t.csv.gz" \
          >"$L/replays/ab_${v}_${t}_$i.json" 2>>"$L/replays/stderr.txt"
      done
    done
  done
  echo "replays: $(($(date +%s) - t0)) s" >>"$L/commits.txt"
  t0=$(date +%s)
  for i in $(seq 1 "${ROUNDS_H:-6}"); do
    if [ $((i % 2)) -eq 0 ]; then order="before head"; else order="head before"; fi
    for v in $order; do
      (cd pool && taskset -c 2,3 "../$out/bin/pool-$v.test" -test.run XXX -test.bench 'CachedAllocFree$' -test.benchtime 0.3s -test.cpu 1,2 >>"$L/hotpath/$v.txt" 2>&1)
      (cd scope && taskset -c 2,3 "../$out/bin/scope-$v.test" -test.run XXX -test.bench . -test.benchtime 0.3s >>"$L/hotpath/$v.txt" 2>&1)
      (cd gpu && taskset -c 2,3 "../$out/bin/gpu-$v.test" -test.run XXX -test.bench 'WithScope|ScopeAllocFree|BarePoolAllocFree|ScopeAllocReleasedAtExit' -test.benchtime 0.3s >>"$L/hotpath/$v.txt" 2>&1)
    done
  done
  echo "hotpath: $(($(date +%s) - t0)) s" >>"$L/commits.txt"
}

report() {
  local L=$1
  python3 scripts/measure/replay_benchfmt.py "$L/replays" before >"$L/replays_before.txt"
  python3 scripts/measure/replay_benchfmt.py "$L/replays" mix >"$L/replays_head.txt"
  (cd "$L" && go run golang.org/x/perf/cmd/benchstat@latest replays_before.txt replays_head.txt)
  (cd "$L/hotpath" && go run golang.org/x/perf/cmd/benchstat@latest before.txt head.txt)
}

case ${1:-} in
build) build "${2:?usage: ab.sh build BASE}" ;;
run) run "${2:?usage: ab.sh run LOGDIR}" ;;
report) report "${2:?usage: ab.sh report LOGDIR}" ;;
*) echo "usage: $0 build BASE | run LOGDIR | report LOGDIR" >&2; exit 64 ;;
esac
