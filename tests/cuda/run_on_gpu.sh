#!/usr/bin/env bash
# Builds and runs every CUDA test and benchmark on a machine with a GPU, in a few minutes,
# and prints a short table last. Usage: tests/cuda/run_on_gpu.sh [build-dir]
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build/cuda-gpu}
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
LOG=$BUILD/logs
mkdir -p "$LOG"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no GPU visible"; exit 1; }
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)

start=$(date +%s)
cmake -S tests/cuda -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$NVCC" \
  -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90}" >"$LOG/configure.txt" 2>&1 || { tail -30 "$LOG/configure.txt"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" >"$LOG/build.txt" 2>&1 || { grep -m20 -A5 error "$LOG/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

status=0
timeout 180 "$BUILD/reel_cuda_tests" >"$LOG/tests.txt" 2>&1 || status=$?
tail -40 "$LOG/tests.txt"
for b in "$BUILD"/bench_*; do
  [ -x "$b" ] || continue
  timeout 90 "$b" >"$LOG/$(basename "$b").txt" 2>&1 || echo "$(basename "$b") exited with $?" >>"$LOG/$(basename "$b").txt"
done

echo
echo "================ reel CUDA summary ================"
grep -E "test cases:|assertions:" "$LOG/tests.txt" | sed 's/^/tests  /'
cat "$LOG"/bench_*.txt 2>/dev/null
echo "total: $(( $(date +%s) - start )) s, tests exit status $status"
exit $status
