#!/usr/bin/env bash
# Times compiling a typical 100-line program that includes <reel.hpp>, at -O2 (median of 3).
set -euo pipefail
cd "$(dirname "$0")/.."
src=benchmarks/compile_time_program.cpp
times=()
for i in 1 2 3; do
  s=$(date +%s.%N)
  g++ -std=c++20 -O2 -fopenmp -Iinclude -I/usr/include/eigen3 -c "$src" -o /tmp/reel_compile_time.o
  e=$(date +%s.%N)
  times+=("$(echo "$e - $s" | bc)")
done
printf '%s\n' "${times[@]}" | sort -n | sed -n 2p | xargs printf 'compile time (median of 3, -O2): %.2f s\n'
