#!/bin/bash
# examples/train's trace replayed on the GPU: gpuscope's pool (gpumem replay --driver cuda) and PyTorch's caching allocator from C++.
cd "$(dirname "$0")"
O=$OUT
{ date -u; for t in train_trace.csv.gz train_trace_stream0.csv.gz; do echo "\$ gpumem replay --driver cuda --repeat 3 $t"; timeout 60 ./gpumem replay --driver cuda --repeat 3 $t 2>&1; echo "rc=$?"; done; } > "$O/replay_gpumem_cuda.txt" 2>&1
{ date -u; echo '$ torch_replay_cpp.sh train_trace_stream0.csv.gz'; timeout 120 bash ./torch_replay_cpp.sh train_trace_stream0.csv.gz 2>&1; echo "rc=$?"; } > "$O/torch_replay.txt" 2>&1
cat "$O"/*.txt | grep -v '^ ' | head -50
