#!/usr/bin/env bash
# Builds the checkpoint readers' libFuzzer harnesses with clang++ (ASan + UBSan) and runs them:
#   fuzz_safetensors  the safetensors reader (read and mapped)
#   fuzz_pt           the .pt reader: zip container + weights-only unpickler (read, mapped, Meta, stream)
#   fuzz_pickle       the weights-only unpickler alone, on data.pkl bytes
#   tests/fuzz/run.sh            a smoke run: 5000 executions per harness (CI)
#   tests/fuzz/run.sh SECONDS    a long run of SECONDS per harness (figures: README)
# Seed corpora: the committed fixtures (tests/reference/*) and tests/fuzz/seeds_*/; new inputs
# go to scratch corpora under build/fuzz (not committed).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/fuzz
mkdir -p "$out"
seed() {  # seed NAME FILES...: a fresh seed folder for harness NAME
  local name=$1
  shift
  rm -rf "$out/seeds_$name"
  mkdir -p "$out/seeds_$name" "$out/corpus_$name"
  cp "$@" "$out/seeds_$name/"
}
seed safetensors tests/reference/safetensors/*.safetensors tests/fuzz/seeds_safetensors/*.safetensors
seed pt tests/reference/pt/*.pt tests/fuzz/seeds_pt/*.pt
seed pickle tests/fuzz/seeds_pickle/*.pkl
if [ $# -ge 1 ]; then limit=(-max_total_time="$1"); else limit=(-runs=5000); fi
for h in safetensors pt pickle; do
  echo "== fuzz_$h"
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Iinclude -I/usr/include/eigen3 -Wno-unused-command-line-argument "tests/fuzz/fuzz_$h.cpp" -o "$out/fuzz_$h"
  # -rss_limit_mb: a file may not make a reader allocate much more than its own size
  "$out/fuzz_$h" "${limit[@]}" -max_len=65536 -rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
    "$out/corpus_$h" "$out/seeds_$h" 2>&1 | tail -n 15
done
