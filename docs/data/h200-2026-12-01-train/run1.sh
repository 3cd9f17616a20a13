#!/bin/bash
# examples/train on the GPU: kernels to PTX, kernel test, training, memcheck, bench, trace, torch replay.
cd "$(dirname "$0")"
O=$OUT
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2; 
  echo '$ nvcc -ptx -arch=sm_90 -O3 -o train.ptx train.cu'; nvcc -ptx -arch=sm_90 -O3 -o "$O/train.ptx" train.cu 2>&1; echo "rc=$?"; head -20 "$O/train.ptx" | grep -E '^\.(version|target)'; } > "$O/nvcc.txt" 2>&1
P=$O/train.ptx
{ echo '$ train.test -test.v -test.run Kernels -ptx train.ptx'; timeout 120 ./train.test -test.v -test.run Kernels -ptx "$P" 2>&1; echo "rc=$?"; } > "$O/kernels_test.txt"
{ echo '$ train -ptx train.ptx -trace train_trace.csv'; /usr/bin/time -v timeout 120 ./train -ptx "$P" -trace "$O/train_trace.csv" 2>&1; echo "rc=$?";
  echo; echo '$ train -ptx train.ptx -accum 4 -steps 50 -checkpoint-every 25 -log-every 25'; timeout 60 ./train -ptx "$P" -accum 4 -steps 50 -checkpoint-every 25 -log-every 25 2>&1; echo "rc=$?"; } > "$O/train_cuda.txt" 2>&1
{ echo '$ compute-sanitizer --tool memcheck train -ptx train.ptx -steps 10 -log-every 5 -checkpoint-every 5 -test 256'; timeout 90 compute-sanitizer --tool memcheck ./train -ptx "$P" -steps 10 -log-every 5 -checkpoint-every 5 -test 256 2>&1; echo "rc=$?"; } > "$O/memcheck.txt" 2>&1
{ for cfg in "-hidden 1024 -batch 256 -bench-steps 200 -bench-rounds 7" "-hidden 4096 -batch 1024 -bench-steps 50 -bench-rounds 5"; do
  echo "\$ train -ptx train.ptx -steps 20 -checkpoint-every 0 -bench scopes,upfront,direct $cfg"; timeout 100 ./train -ptx "$P" -steps 20 -checkpoint-every 0 -bench scopes,upfront,direct $cfg 2>&1; echo "rc=$?"; echo; done; } > "$O/bench.txt" 2>&1
{ echo '$ torch_replay_cpp.sh train_trace.csv'; timeout 100 bash ./torch_replay_cpp.sh "$O/train_trace.csv" 2>&1; echo "rc=$?"; } > "$O/torch_replay.txt" 2>&1
gzip -9 "$O/train_trace.csv"
ls -la "$O"
