#!/usr/bin/env bash
# Times compiling a typical 100-line program that includes <reel.hpp>, at -O2: 5 runs,
# reports the fastest (least disturbed by other load on the machine) and the median.
set -euo pipefail
cd "$(dirname "$0")/.."
src=benchmarks/compile_time_program.cpp
times=()
for i in 1 2 3 4 5; do
  s=$(date +%s.%N)
  g++ -std=c++20 -O2 -fopenmp -Iinclude -I/usr/include/eigen3 -c "$src" -o /tmp/reel_compile_time.o
  e=$(date +%s.%N)
  times+=("$(echo "$e - $s" | bc)")
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
printf 'compile time at -O2 (5 runs): fastest %.2f s, median %.2f s\n' "$(echo "$sorted" | sed -n 1p)" "$(echo "$sorted" | sed -n 3p)"
