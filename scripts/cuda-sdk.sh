#!/usr/bin/env bash
# cuda-sdk.sh fetches the two files a machine without CUDA needs to compile
# gpu/cuda (-tags cuda): cuda.h and the stub libcuda.so, from Debian's
# nvidia-cuda-dev package (section non-free). It extracts only those files into
# .cuda-sdk/ (git-ignored) and prints the cgo flags to use:
#
#   eval "$(scripts/cuda-sdk.sh)"
#   go test -c -tags cuda ./gpu/cuda
#
# The stub library only satisfies the linker; at run time the binaries load
# the driver's libcuda.so.1 from the GPU machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sdk="$root/.cuda-sdk"
if [ ! -f "$sdk/include/cuda.h" ] || [ ! -f "$sdk/lib/libcuda.so" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # A private apt configuration with non-free enabled, so the machine's own
  # sources are left as they are.
  mkdir -p "$work/lists/partial" "$work/archives/partial"
  echo "deb http://deb.debian.org/debian bookworm main non-free" >"$work/sources.list"
  opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=-"
        -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives"
        -o "APT::Get::List-Cleanup=0")
  apt-get "${opts[@]}" -qq update >&2
  (cd "$work" && apt-get "${opts[@]}" -qq download nvidia-cuda-dev >&2)
  deb=$(ls "$work"/nvidia-cuda-dev_*.deb)
  mkdir -p "$work/x" "$sdk/include" "$sdk/lib"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/x" --wildcards '*/cuda.h' '*/stubs/libcuda.so' >&2
  cp "$(find "$work/x" -name cuda.h | head -n1)" "$sdk/include/cuda.h"
  cp "$(find "$work/x" -path '*stubs/libcuda.so' | head -n1)" "$sdk/lib/libcuda.so"
fi
echo "export CGO_CFLAGS='-I$sdk/include'"
echo "export CGO_LDFLAGS='-L$sdk/lib'"
