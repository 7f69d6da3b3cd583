#!/usr/bin/env bash
# Times compiling a typical 100-line program that includes <reel/reel.hpp>, at -O2: 5 runs (RUNS=n
# for another count), reports the fastest (least disturbed by other load on the machine) and
# the median.
#   benchmarks/compile_time.sh [--runtime] [--linalg] [--pch] [--no-autograd]
#   --runtime  as a reel::runtime user compiles it (REEL_COMPILED_LIB: the runtime and the
#              listed instantiations come from the library); default: header-only
#   --no-autograd  with REEL_NO_AUTOGRAD (recording compiled out: what autograd costs a unit;
#              not with --linalg, whose program calls backward)
#   --linalg   the same program with one linalg::slogdet(...).logabsdet.backward()
#   --pch      with <reel/reel.hpp> (and <reel/linalg.hpp>) precompiled with the same flags,
#              as target_precompile_headers does; making the PCH (once per target) is not timed
set -euo pipefail
cd "$(dirname "$0")/.."
src=benchmarks/compile_time_program.cpp
flags=()
pch=0
for a in "$@"; do
  case "$a" in
    --runtime) flags+=(-DREEL_COMPILED_LIB) ;;
    --linalg) flags+=(-DREEL_CT_LINALG) ;;
    --no-autograd) flags+=(-DREEL_NO_AUTOGRAD) ;;
    --pch) pch=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
if [ "$pch" = 1 ]; then
  dir=$(mktemp -d)
  printf '#include <reel/reel.hpp>\n#include <reel/linalg.hpp>\n' >"$dir/reel_pch.hpp"
  g++ -std=c++20 -O2 -fopenmp "${flags[@]}" -Iinclude -isystem /usr/include/eigen3 -x c++-header "$dir/reel_pch.hpp" \
    -o "$dir/reel_pch.hpp.gch"
  flags+=(-Winvalid-pch -include "$dir/reel_pch.hpp")
fi
runs=${RUNS:-5}
times=()
for ((i = 0; i < runs; i++)); do
  s=$(date +%s.%N)
  g++ -std=c++20 -O2 -fopenmp "${flags[@]}" -Iinclude -isystem /usr/include/eigen3 -c "$src" -o /tmp/reel_compile_time.o
  e=$(date +%s.%N)
  times+=("$(echo "$e - $s" | bc)")
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
printf 'compile time at -O2 (%d runs%s): fastest %.2f s, median %.2f s\n' "$runs" "${*:+, $*}" "$(echo "$sorted" | sed -n 1p)" \
  "$(echo "$sorted" | sed -n "$(((runs + 1) / 2))p")"
