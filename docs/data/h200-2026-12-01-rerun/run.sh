#!/usr/bin/env bash
# Re-measure, with the replay that plans outside its timed region: examples/train's trace (gpumem 5 runs, PyTorch C++ 5 runs)
# and the GrowthStep curve (one run of --repeat 3 per step and trace, as scripts/pool-gpu.sh's steps section).
cd "$(dirname "$0")/.."
L=/tmp/runG; rm -rf $L; mkdir -p $L/train $L/steps
{ date -u; echo "commit $(cat .gpubin-exp/commit.txt)"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > $L/machine.txt
T=docs/data/h200-2026-12-01-train
for i in 1 2 3 4 5; do
  .gpubin-exp/gpumem replay --driver cuda --repeat 3 $T/train_trace.csv.gz > $L/train/replay_train_trace$i.json 2>>$L/stderr.txt
done
bash .peers/torch_replay_cpp.sh $T/train_trace_stream0.csv.gz $T/train_trace_stream0.csv.gz $T/train_trace_stream0.csv.gz $T/train_trace_stream0.csv.gz $T/train_trace_stream0.csv.gz > $L/train/torch_cpp.jsonl 2>&1
for t in mlp_train resnet50_train vit_infer_dynamic llama_prefill_dynamic; do
  for s in 0 4194304 10485760 20971520 67108864 268435456; do
    .gpubin-exp/gpumem replay --driver cuda --repeat 3 --growth-step $s cmd/gpumem/testdata/$t.csv.gz > $L/steps/replay_${t}_step$s.json 2>>$L/stderr.txt
  done
done
tar czf "$OUT/runG.tgz" -C /tmp runG
