#!/usr/bin/env bash
# Times compiling a typical 100-line program that includes <reel.hpp>, at -O2: 5 runs (RUNS=n
# for another count), reports the fastest (least disturbed by other load on the machine) and
# the median.
#   benchmarks/compile_time.sh [--runtime] [--linalg]
#   --runtime  as a reel::runtime user compiles it (REEL_COMPILED_LIB: the runtime and the
#              listed instantiations come from the library); default: header-only
#   --linalg   the same program with one linalg::slogdet(...).logabsdet.backward()
set -euo pipefail
cd "$(dirname "$0")/.."
src=benchmarks/compile_time_program.cpp
flags=()
for a in "$@"; do
  case "$a" in
    --runtime) flags+=(-DREEL_COMPILED_LIB) ;;
    --linalg) flags+=(-DREEL_CT_LINALG) ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
runs=${RUNS:-5}
times=()
for ((i = 0; i < runs; i++)); do
  s=$(date +%s.%N)
  g++ -std=c++20 -O2 -fopenmp "${flags[@]}" -Iinclude -I/usr/include/eigen3 -c "$src" -o /tmp/reel_compile_time.o
  e=$(date +%s.%N)
  times+=("$(echo "$e - $s" | bc)")
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
printf 'compile time at -O2 (%d runs%s): fastest %.2f s, median %.2f s\n' "$runs" "${*:+, $*}" "$(echo "$sorted" | sed -n 1p)" \
  "$(echo "$sorted" | sed -n "$(((runs + 1) / 2))p")"
