#!/usr/bin/env bash
# Builds the checkpoint readers' libFuzzer harnesses with clang++ (ASan + UBSan) and runs them.
#   tests/fuzz/run.sh            a smoke run: 5000 executions per harness (CI)
#   tests/fuzz/run.sh SECONDS    a long run of SECONDS per harness (figures: README)
# The seed corpus: tests/reference/safetensors/*.safetensors and tests/fuzz/seeds_safetensors/;
# new inputs go to a scratch corpus under build/fuzz (not committed).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/fuzz
mkdir -p "$out/corpus_safetensors" "$out/seeds_safetensors"
cp tests/reference/safetensors/*.safetensors tests/fuzz/seeds_safetensors/*.safetensors "$out/seeds_safetensors/"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -I/usr/include/eigen3 -Wno-unused-command-line-argument tests/fuzz/fuzz_safetensors.cpp -o "$out/fuzz_safetensors"
if [ $# -ge 1 ]; then limit=(-max_total_time="$1"); else limit=(-runs=5000); fi
# -rss_limit_mb: a file may not make the reader allocate much more than its own size
"$out/fuzz_safetensors" "${limit[@]}" -max_len=65536 -rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
  "$out/corpus_safetensors" "$out/seeds_safetensors" 2>&1 | tail -n 15
