#!/usr/bin/env bash
# gpu-validate.sh runs, on the GPU machine, everything docs/gpu-validation.md
# and docs/benchmarks.md report, after `scripts/gpu-test.sh build` here.
# Logs go to LOGDIR (default .gpubin/logs), and all of them, packed, to
# LOGDIR/../gpu-validation-logs.tar.gz.
#
#   scripts/measure/gpu-validate.sh [LOGDIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
logs=${1:-.gpubin/logs}
mkdir -p "$logs"
{
  date -u
  echo "commit $(cat .gpubin/commit.txt 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nvidia-smi | head -4
} >"$logs/machine.txt" 2>&1

scripts/gpu-test.sh run "$logs" 2>&1 | tee "$logs/summary.txt"

# Benchmarks, one run, all sizes and methods.
# Only BenchmarkAllocFree: BenchmarkDriverCalls, the per-call costs that
# scripts/measure/pool-gpu.sh records, alone takes about nine minutes.
(cd gpu/cuda && "$root/.gpubin/gpu_cuda.test" -test.run XXX -test.bench 'BenchmarkAllocFree$' -test.benchtime 0.5s -test.count 5) >"$logs/bench_go.txt" 2>&1
python3 scripts/measure/bench_python.py >"$logs/bench_python.json" 2>&1

# Trace replays on the GPU, to compare with the simulated source.
for t in mlp_train resnet50_train; do
  .gpubin/gpumem replay --driver cuda "cmd/gpumem/testdata/$t.csv.gz" >"$logs/replay_cuda_$t.json" 2>&1
done

# compute-sanitizer: the kernel example and a 30-second stress run.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n1)
if [ -n "$sanitizer" ]; then
  "$sanitizer" --tool memcheck --error-exitcode 9 .gpubin/kernel >"$logs/sanitizer_kernel.txt" 2>&1
  echo "exit $?" >>"$logs/sanitizer_kernel.txt"
  "$sanitizer" --tool racecheck --error-exitcode 9 .gpubin/kernel >"$logs/sanitizer_racecheck_kernel.txt" 2>&1
  echo "exit $?" >>"$logs/sanitizer_racecheck_kernel.txt"
  "$sanitizer" --tool memcheck --error-exitcode 9 .gpubin/gpumem stress --driver cuda --seconds 30 --goroutines 16 >"$logs/sanitizer_stress.txt" 2>&1
  echo "exit $?" >>"$logs/sanitizer_stress.txt"
else
  echo "compute-sanitizer not found" >"$logs/sanitizer_kernel.txt"
fi
tar -C "$logs" -czf "$logs/../gpu-validation-logs.tar.gz" .
ls -la "$logs"
