#!/usr/bin/env bash
# Interleaved A/B of pool's cached pairs on the GPU machine's host CPU.
cd "$(dirname "$0")/../../pool"
O=/tmp/hp; rm -rf $O; mkdir -p $O
lscpu | head -20 > $O/cpu.txt
for i in $(seq 1 12); do
  if [ $((i % 2)) -eq 0 ]; then order="before head"; else order="head before"; fi
  for v in $order; do
    taskset -c 2,3 ../.gpubin-exp/hp/pool-$v.test -test.run XXX -test.bench 'CachedAllocFree$' -test.benchtime 0.3s -test.cpu 1,2 >> $O/$v.txt 2>&1
  done
done
tar czf "$OUT/hp.tgz" -C /tmp hp
