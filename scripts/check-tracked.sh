#!/usr/bin/env bash
# check-tracked.sh fails when git tracks a binary file, or a file over
# 1 MB, outside docs/data and testdata directories: compiled tests and
# programs belong in .gitignore, raw measurements under docs/data.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bad=0
while IFS= read -r -d '' f; do
  case "$f" in docs/data/* | testdata/* | */testdata/*) continue ;; esac
  [ -f "$f" ] || continue
  size=$(stat -c %s "$f")
  if [ "$size" -gt 1048576 ]; then
    echo "tracked file over 1 MB: $f ($size bytes)"; bad=1
  fi
  # grep -I treats a file with a NUL byte as binary and matches nothing in it.
  if [ "$size" -gt 0 ] && ! grep -Iq '' "$f"; then
    echo "tracked binary file: $f"; bad=1
  fi
done < <(git ls-files -z)
exit $bad
