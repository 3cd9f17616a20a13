#!/bin/bash
# Final A/B build: HEAD's suite and gpumem (pool-gpu.sh build), plus
# gpumem at 048fe7f, gpumem of 048fe7f's harness on HEAD's pool (mix), and
# the hot-path benchmark binaries at 048fe7f and HEAD; all xz'ed into .gpubin-xz.
set -euo pipefail
cd /work/main
eval "$(scripts/cuda-sdk.sh)"
scripts/pool-gpu.sh build
head=$(git rev-parse --short HEAD)
rm -rf .gpubin-exp && mkdir -p .gpubin-exp/ab
rm -rf /tmp/final/before /tmp/final/mix
git worktree prune
git worktree add -f /tmp/final/before 048fe7f >/dev/null
git worktree add -f /tmp/final/mix HEAD >/dev/null
(cd /tmp/final/mix && rm -rf cmd/gpumem && git checkout 048fe7f -- cmd/gpumem)
(cd /tmp/final/before && go build -tags cuda -ldflags='-s -w' -o /work/main/.gpubin-exp/ab/gpumem-before ./cmd/gpumem)
(cd /tmp/final/mix && go build -tags cuda -ldflags='-s -w' -o /work/main/.gpubin-exp/ab/gpumem-mix ./cmd/gpumem)
for v in before head; do
  src=/tmp/final/before; [ $v = head ] && src=/work/main
  for p in pool scope gpu; do
    (cd $src/$p && go test -c -ldflags='-s -w' -o /work/main/.gpubin-exp/ab/$p-$v.test .)
  done
done
echo "before 048fe7f, head $head, mix = cmd/gpumem of 048fe7f on $head" > .gpubin-exp/ab/commits.txt
git worktree remove --force /tmp/final/before; git worktree remove --force /tmp/final/mix
rm -rf .gpubin-xz && mkdir -p .gpubin-xz
for f in .gpubin/*; do
  case $f in *.gz) gunzip -c $f | xz -9e -T2 > .gpubin-xz/gpubin__$(basename ${f%.gz}).xz ;; *) cp $f .gpubin-xz/gpubin__$(basename $f) ;; esac
done
for f in .gpubin-exp/ab/*; do
  case $f in *.txt) cp $f .gpubin-xz/exp__$(basename $f) ;; *) xz -9e -T2 -c $f > .gpubin-xz/exp__$(basename $f).xz ;; esac
done
cat > .gpubin-xz/unpack.py <<'PY'
import lzma, os, shutil, stat
src = os.path.dirname(os.path.abspath(__file__))
for name in os.listdir(src):
    if "__" not in name:
        continue
    kind, base = name.split("__", 1)
    dst = {"gpubin": ".gpubin", "exp": ".gpubin-exp/ab"}[kind]
    os.makedirs(dst, exist_ok=True)
    if base.endswith(".xz"):
        out = os.path.join(dst, base[:-3])
        with lzma.open(os.path.join(src, name)) as i, open(out, "wb") as o:
            shutil.copyfileobj(i, o)
        os.chmod(out, 0o755)
    else:
        shutil.copy(os.path.join(src, name), os.path.join(dst, base))
PY
cp /tmp/final/device.sh .gpubin-xz/device.sh
du -sh .gpubin-xz
