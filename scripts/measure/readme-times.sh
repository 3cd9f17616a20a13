#!/usr/bin/env bash
# readme-times.sh times the README's two commands as a newcomer runs them:
# on a fresh clone of COMMIT, in a temporary folder, with empty module and
# build caches of their own, one after the other (so the tests reuse the
# first command's downloads and compiled packages, as a newcomer's would).
# Modules come from the module proxy, as go's environment says.
#
#   scripts/measure/readme-times.sh COMMIT OUTDIR
#
# OUTDIR (a docs/data folder, made if missing) gets times.txt (the
# machine, uptime's load before and after each command, and each command's
# `time` and exit status), one file of raw output per command
# (quickstart.txt, test.txt) and a README.md that says what ran where.
# Run it on an idle machine: the load averages in times.txt say whether it
# was. REPO (default: this repository) is what to clone; QUICK=1 runs two
# commands of a second each instead (`go version`, `go env`), to try the
# script itself.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 COMMIT OUTDIR" >&2
  exit 2
fi
commit=$1 outdir=$2
out=$(mkdir -p "$outdir" && cd "$outdir" && pwd)
repo=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}

tmp=$(mktemp -d)
# The module cache is read-only unless -modcacherw; make it writable to
# remove it either way.
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
git clone --quiet --no-local --no-checkout "$repo" "$tmp/gpuscope"
git -C "$tmp/gpuscope" checkout --quiet --detach "$commit"
full=$(git -C "$tmp/gpuscope" rev-parse HEAD)
export GOCACHE="$tmp/gocache" GOMODCACHE="$tmp/gomodcache" GOFLAGS=-modcacherw
mkdir "$GOCACHE" "$GOMODCACHE"

names=(quickstart test)
cmds=("go run ./examples/quickstart" "go test ./...")
if [ "${QUICK:-}" = 1 ]; then
  cmds=("go version" "go env GOCACHE GOMODCACHE")
fi

{
  echo "# machine"
  date -u
  echo "commit $full"
  echo "cores $(nproc)"
  go version
  echo "GOCACHE and GOMODCACHE: empty folders under $tmp"
} >"$out/times.txt"

TIMEFORMAT='%R s real, %U s user, %S s sys'
for i in "${!cmds[@]}"; do
  cmd=${cmds[$i]} name=${names[$i]}
  {
    echo
    echo "# $cmd"
    echo "before: $(uptime)"
  } >>"$out/times.txt"
  status=0
  # time's report goes to the group's stderr, the command's own output to
  # its file.
  { time (cd "$tmp/gpuscope" && $cmd >"$out/$name.txt" 2>&1) || status=$?; } 2>>"$out/times.txt"
  {
    echo "exit status $status"
    echo "after: $(uptime)"
  } >>"$out/times.txt"
done

cat >"$out/README.md" <<EOF
# The README's two commands on a fresh clone, $(date -u +%Y-%m-%d)

Commit ${full:0:7}, cloned afresh into a temporary folder, with empty
module and build caches (GOCACHE and GOMODCACHE of their own), modules
from the module proxy; on $(nproc) cores (uptime's load in times.txt).
Command, from the repository root:

    scripts/measure/readme-times.sh $commit $outdir

which ran, one after the other in the clone:

$(for c in "${cmds[@]}"; do echo "    $c"; done)

| file | what |
|---|---|
| times.txt | the machine, and for each command its \`time\`, exit status and the load before and after |
| $(IFS=,; echo "${names[*]}" | sed 's/,/.txt, /g').txt | each command's output, stdout and stderr |
EOF
cat "$out/times.txt"
