#!/bin/bash
# On the device, from the repository root: bash .gpubin-xz/device.sh PART
#   suite:   the CUDA suite
#   hotpath: the hot-path A/B (048fe7f, HEAD) on the host CPU
#   replays: the replay A/B (048fe7f, 048fe7f's harness on HEAD's pool, HEAD)
set -u
part=$1
python3 "$(dirname "$0")/unpack.py"
L=/tmp/final/$part; rm -rf $L; mkdir -p $L
cp .gpubin-exp/ab/commits.txt $L/ 2>/dev/null; cp .gpubin/commit.txt $L/
start=$(date +%s)
case $part in
suite)
  scripts/pool-gpu.sh run $L/run suite > $L/suite_run.txt 2>&1
  ;;
hotpath)
  lscpu > $L/cpu.txt
  mkdir -p $L/hotpath
  for i in $(seq 1 ${ROUNDS:-10}); do
    if [ $((i % 2)) -eq 0 ]; then order="before head"; else order="head before"; fi
    for v in $order; do
      (cd pool && taskset -c 2,3 ../.gpubin-exp/ab/pool-$v.test -test.run XXX -test.bench 'CachedAllocFree$' -test.benchtime 0.3s -test.cpu 1,2 >> $L/hotpath/pool_$v.txt 2>&1)
      (cd scope && taskset -c 2,3 ../.gpubin-exp/ab/scope-$v.test -test.run XXX -test.bench . -test.benchtime 0.3s >> $L/hotpath/scope_$v.txt 2>&1)
      (cd gpu && taskset -c 2,3 ../.gpubin-exp/ab/gpu-$v.test -test.run XXX -test.bench 'WithScope|ScopeAllocFree|BarePoolAllocFree|ScopeAllocReleasedAtExit' -test.benchtime 0.3s >> $L/hotpath/gpu_$v.txt 2>&1)
    done
  done
  ;;
replays)
  mkdir -p $L/ab
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $L/machine.txt 2>&1
  for i in $(seq 1 ${ROUNDS:-7}); do
    case $((i % 3)) in 0) order="before mix head" ;; 1) order="mix head before" ;; 2) order="head before mix" ;; esac
    for v in $order; do
      bin=.gpubin-exp/ab/gpumem-$v; [ $v = head ] && bin=.gpubin/gpumem
      for t in mlp_train resnet50_train vit_infer_dynamic llama_prefill_dynamic; do
        $bin replay --driver cuda --repeat 3 cmd/gpumem/testdata/$t.csv.gz > $L/ab/${v}_${t}_$i.json 2>> $L/ab/stderr.txt
      done
    done
  done
  ;;
esac
echo "seconds $(( $(date +%s) - start ))" >> $L/commits.txt
tar czf "$OUT/$part.tgz" -C /tmp/final $part
