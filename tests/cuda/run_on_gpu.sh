#!/usr/bin/env bash
# The CUDA tests and benchmarks on a GPU machine that has nvcc, CMake and ninja but no Eigen,
# no doctest and no package registry (the device tool's H200 machines), in a few minutes.
#
#   tests/cuda/run_on_gpu.sh --prepare   here, without a GPU: build the tests and benchmarks
#                                        (sm_90 machine code, Release, one device-linked module)
#                                        and put them, with Eigen's and doctest's headers for a
#                                        rebuild there, into gpu-carry/ (ignored by git);
#                                        checks that it fits what a GPU run can carry
#   tests/cuda/run_on_gpu.sh --dry-run   here: everything the GPU run does short of using a GPU:
#                                        the carried binaries start and their tests report
#                                        "no CUDA device", the shared libraries resolve, and the
#                                        fallback build configures against the carried headers
#   tests/cuda/run_on_gpu.sh --ci        here, in CI: every CUDA target compiled and linked as
#                                        above but with the host code at -O0 (a quarter less compile
#                                        time; device code as the GPU run has it), in build/cuda-ci;
#                                        the binaries start and the tests report no device
#   tests/cuda/run_on_gpu.sh             there (with gpu-carry/ carried): run the carried
#                                        binaries; if they cannot start on that machine's
#                                        system, rebuild from source with the carried headers
#                                        first. Logs go to $OUT (or build/gpu-logs), a table last.
#
# The device tool's call (one command, gpu-carry/ carried):
#   run(command="bash tests/cuda/run_on_gpu.sh", carry=["gpu-carry"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CARRY=$ROOT/gpu-carry
BUILD=${REEL_GPU_BUILD:-$ROOT/build/cuda-sm90}
MAX_CARRY_MB=48  # of the 64 MiB a GPU run may carry, leaving room for the work tree
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=$(cd "$(dirname "$NVCC")/.." 2>/dev/null && pwd)
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:$CUDA_HOME/lib:$CUDA_HOME/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BINARIES=(reel_cuda_tests reel_cuda_bench)
# the benchmarks in reel_cuda_bench (tests/cuda/bench_<name>.cu), run as `reel_cuda_bench <name>`
BENCHES=(elementwise matmul_lce adamw)
# reel::distributed on NCCL: built where NCCL is found, carried and run apart from the others
# (it needs libnccl.so.2 where it runs: the CUDA toolkit's, or pip's nvidia-nccl package)
NCCL_BINARY=reel_nccl_tests

configure() {  # configure <build dir> [extra cmake args...]
  local dir=$1
  shift
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S tests/cuda -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$NVCC" \
    -DCMAKE_CUDA_ARCHITECTURES=90 "$@"
}

prepare() {
  local start=$SECONDS
  configure "$BUILD" || return 1
  cmake --build "$BUILD" -j"$(nproc)" || return 1
  rm -rf "$CARRY"
  mkdir -p "$CARRY/bin" "$CARRY/include"
  for b in "${BINARIES[@]}"; do
    [ -x "$BUILD/$b" ] || { echo "prepare: $BUILD/$b was not built"; return 1; }
    cp "$BUILD/$b" "$CARRY/bin/"
  done
  [ -x "$BUILD/$NCCL_BINARY" ] && cp "$BUILD/$NCCL_BINARY" "$CARRY/bin/"
  local eigen doctest
  eigen=$(find /usr/include /usr/local/include -maxdepth 2 -name signature_of_eigen3_matrix_library -printf '%h\n' 2>/dev/null | head -1)
  doctest=$(find /usr/include /usr/local/include -maxdepth 2 -path '*/doctest/doctest.h' -printf '%h\n' 2>/dev/null | head -1)
  [ -n "$eigen" ] && [ -n "$doctest" ] || { echo "prepare: Eigen or doctest headers not found"; return 1; }
  cp -r "$eigen" "$CARRY/include/eigen3"
  cp -r "$doctest" "$CARRY/include/doctest"
  git rev-parse HEAD >"$CARRY/commit" 2>/dev/null || true
  git status --porcelain -- include tests/cuda >"$CARRY/uncommitted" 2>/dev/null || true
  local mb
  mb=$(du -sm "$CARRY" | cut -f1)
  echo "prepare: gpu-carry/ holds ${mb} MiB (at most $MAX_CARRY_MB), built in $((SECONDS - start)) s"
  [ "$mb" -le "$MAX_CARRY_MB" ] || { echo "prepare: gpu-carry/ is too large to carry"; return 1; }
  echo 'next, on the GPU: run(command="bash tests/cuda/run_on_gpu.sh", carry=["gpu-carry"], timeout_s=540)'
}

# Whether every binary in a folder (default: the carried ones) starts here (its shared
# libraries resolve).
binaries_start() {
  local dir=${1:-$CARRY/bin} ok=0
  for b in "${BINARIES[@]}"; do
    if [ ! -x "$dir/$b" ]; then
      echo "missing: $dir/$b"
      ok=1
    elif ldd "$dir/$b" 2>&1 | grep -q "not found"; then
      echo "$b: unresolved libraries:"
      ldd "$dir/$b" | grep "not found"
      ok=1
    fi
  done
  return $ok
}

# The test binary in a folder starts, and without a GPU every case says so instead of failing.
# (Its summary is not echoed: every case returned early, which is no test result.)
tests_report_no_device() {
  local out cases
  out=$("$1/reel_cuda_tests" 2>&1)
  cases=$(echo "$out" | grep -c "no CUDA device: skipped")
  echo "the test binary starts; $cases test cases reported no CUDA device"
  [ "$cases" -gt 0 ] || { echo "the tests did not report a missing GPU"; return 1; }
  echo "$out" | grep -qE "test cases: *[0-9]+ \| *[0-9]+ passed \| *0 failed" || { echo "$out" | tail -20; return 1; }
}

# Where libnccl.so.2 is (the CUDA toolkit's, pip's nvidia-nccl package's, or anywhere).
nccl_lib_dir() {
  local d
  for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib"; do [ -e "$d/libnccl.so.2" ] && { echo "$d"; return 0; }; done
  d=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$d" ] && [ -e "$d/libnccl.so.2" ] && { echo "$d"; return 0; }
  d=$(find / -xdev -name libnccl.so.2 -not -path '/proc/*' -printf '%h\n' 2>/dev/null | head -1)
  [ -n "$d" ] && { echo "$d"; return 0; }
  return 1
}

# The NCCL tests: one rank; then, on a machine with several GPUs, one rank per GPU (torchrun's
# variables, NCCL's id through a file).
run_nccl() {
  local bin=$1 logs=$2 status=0 gpus r
  local libdir
  libdir=$(nccl_lib_dir) || { echo "nccl: libnccl.so.2 not found on this machine: NOT RUN" | tee -a "$logs/summary.txt"; return 1; }
  export LD_LIBRARY_PATH="$libdir:$LD_LIBRARY_PATH"
  [ -x "$bin/$NCCL_BINARY" ] || { echo "nccl: no $NCCL_BINARY: NOT RUN" | tee -a "$logs/summary.txt"; return 1; }
  timeout 120 "$bin/$NCCL_BINARY" >"$logs/nccl-1.txt" 2>&1 || status=$?
  echo "nccl, 1 rank: $(grep -E 'test cases:' "$logs/nccl-1.txt" | tail -1) (exit $status)" | tee -a "$logs/summary.txt"
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  if [ "$gpus" -gt 1 ]; then
    local file=/tmp/reel-nccl-id-$$ pids=()
    rm -f "$file"
    for ((r = 0; r < gpus; r++)); do
      RANK=$r WORLD_SIZE=$gpus LOCAL_RANK=$r REEL_INIT_FILE=$file timeout 180 "$bin/$NCCL_BINARY" >"$logs/nccl-$gpus-rank$r.txt" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    echo "nccl, $gpus ranks: $(grep -h 'test cases:' "$logs"/nccl-"$gpus"-rank*.txt | sort | uniq -c | tr -s ' ')" | tee -a "$logs/summary.txt"
  fi
  return $status
}

# The NCCL test binary, where it was built, starts and says that there is no device.
nccl_reports_no_device() {
  [ -x "$1/$NCCL_BINARY" ] || { echo "(NCCL not found here: $NCCL_BINARY not built)"; return 0; }
  local out
  out=$(LD_LIBRARY_PATH="$(nccl_lib_dir):$LD_LIBRARY_PATH" "$1/$NCCL_BINARY" 2>&1)
  echo "$out" | grep -qE "test cases: *[0-9]+ \| *[0-9]+ passed \| *0 failed" || { echo "$out" | tail -20; return 1; }
  echo "the NCCL test binary starts; $(echo "$out" | grep -c "no CUDA device: skipped") cases reported no CUDA device"
}

# Every benchmark in reel_cuda_bench is there and, without a GPU, says so.
benches_report_no_device() {
  local b out
  for b in "${BENCHES[@]}"; do
    out=$("$1/reel_cuda_bench" "$b" 2>&1)
    echo "$out" | grep -q "no CUDA device" || { echo "reel_cuda_bench $b: $out"; return 1; }
  done
  echo "the benchmark binary starts; ${#BENCHES[@]} benchmarks reported no CUDA device"
}

# CI: compile and link every CUDA target, host code at -O0.
ci_build() {
  local start=$SECONDS dir=$ROOT/build/cuda-ci
  configure "$dir" -DCMAKE_CUDA_FLAGS_RELEASE="-O0 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" || return 1
  cmake --build "$dir" -j"$(nproc)" || return 1
  echo "ci: every CUDA target built in $((SECONDS - start)) s (host code at -O0)"
  binaries_start "$dir" && tests_report_no_device "$dir" && benches_report_no_device "$dir" && nccl_reports_no_device "$dir"
}

dry_run() {
  [ -d "$CARRY/bin" ] || { echo "dry run: no gpu-carry/ (run --prepare first)"; return 1; }
  local mb status=0
  mb=$(du -sm "$CARRY" | cut -f1)
  echo "dry run: gpu-carry/ ${mb} MiB (at most $MAX_CARRY_MB)"
  [ "$mb" -le "$MAX_CARRY_MB" ] || status=1
  binaries_start || status=1
  echo -n "dry run: "
  tests_report_no_device "$CARRY/bin" || status=1
  benches_report_no_device "$CARRY/bin" || status=1
  nccl_reports_no_device "$CARRY/bin" || status=1
  # The fallback build configures against the carried headers alone.
  configure "$ROOT/build/cuda-dry-run" -DREEL_CARRIED_HEADERS="$CARRY/include" \
    >"$ROOT/build/cuda-dry-run.log" 2>&1 || { tail -20 "$ROOT/build/cuda-dry-run.log"; status=1; }
  echo "dry run: the GPU run would execute: ${BINARIES[*]} (from gpu-carry/bin, or rebuilt in $BUILD)"
  [ $status = 0 ] && echo "dry run: ok" || echo "dry run: FAILED"
  return $status
}

on_gpu() {
  local logs=${OUT:-$ROOT/build/gpu-logs} start=$SECONDS bin=$CARRY/bin
  mkdir -p "$logs"
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | tee "$logs/summary.txt" ||
    { echo "no GPU visible"; return 1; }
  [ -f "$CARRY/commit" ] && echo "binaries of commit $(cat "$CARRY/commit") $( [ -s "$CARRY/uncommitted" ] && echo '+ uncommitted changes')" | tee -a "$logs/summary.txt"
  if [ ! -d "$bin" ] || ! binaries_start >"$logs/build.txt" 2>&1 || ! "$bin/reel_cuda_tests" --list-test-cases >/dev/null 2>&1; then
    echo "carried binaries unusable here (see build.txt): building from source" | tee -a "$logs/summary.txt"
    local headers=()
    [ -d "$CARRY/include" ] && headers=(-DREEL_CARRIED_HEADERS="$CARRY/include")
    local ncclroot
    ncclroot=$(nccl_lib_dir) && headers+=(-DREEL_NCCL_ROOT="$(dirname "$ncclroot")")
    { configure "$BUILD" "${headers[@]}" && cmake --build "$BUILD" -j"$(nproc)"; } >>"$logs/build.txt" 2>&1 ||
      { grep -m20 -A5 error "$logs/build.txt"; return 1; }
    bin=$BUILD
    echo "build: $((SECONDS - start)) s" | tee -a "$logs/summary.txt"
  fi

  # A test case that crashes the binary would hide every case after it: run again without the
  # crashed ones (each crash's backtrace from cuda-gdb, where the machine has it, in crash.txt).
  local status=0 excluded="" crashed pass
  : >"$logs/tests.txt"
  for pass in 1 2 3 4; do
    status=0
    timeout 240 "$bin/reel_cuda_tests" ${excluded:+-tce="$excluded"} >"$logs/tests-$pass.txt" 2>&1 || status=$?
    cat "$logs/tests-$pass.txt" >>"$logs/tests.txt"
    crashed=$(grep -B3 "test case CRASHED" "$logs/tests-$pass.txt" | sed -n 's/^TEST CASE: *//p' | head -1)
    rm -f "$logs/tests-$pass.txt"
    [ -n "$crashed" ] || break
    crashed=${crashed//,/?}  # (doctest's filters are comma-separated; ? matches any character)
    echo "crashed: $crashed (run again without it)" | tee -a "$logs/summary.txt"
    { echo "== $crashed: its assertions up to the crash (-s)"
      timeout 120 "$bin/reel_cuda_tests" -tc="$crashed" -s 2>&1 | grep -vE "^(=+|-+)$" | tail -60; } >>"$logs/crash.txt"
    if command -v cuda-gdb >/dev/null; then  # (the stack's words too: a jump to 0 leaves no frames)
      timeout 180 cuda-gdb -batch -ex run -ex bt -ex 'x/12a $sp' -ex "info threads" \
        --args "$bin/reel_cuda_tests" -tc="$crashed" >>"$logs/crash.txt" 2>&1
    fi
    excluded="${excluded:+$excluded,}$crashed"
    status=1
  done
  tail -40 "$logs/tests.txt"
  local nccl_status=0
  run_nccl "$bin" "$logs" || nccl_status=$?
  : >"$logs/bench.txt"
  for b in "${BENCHES[@]}"; do
    timeout 90 "$bin/reel_cuda_bench" "$b" >>"$logs/bench.txt" 2>&1 || echo "bench_$b exited with $?" >>"$logs/bench.txt"
  done

  {
    echo
    echo "================ reel CUDA summary ================"
    grep -E "test cases:|assertions:" "$logs/tests.txt" | sed 's/^/tests  /'
    grep -h "^crashed:" "$logs/summary.txt" | sed 's/^/tests  /'
    grep -h "^nccl" "$logs/summary.txt"
    cat "$logs/bench.txt"
    echo "total: $((SECONDS - start)) s, tests exit status $status, NCCL tests $nccl_status"
  } | tee -a "$logs/summary.txt"
  return $status
}

case "${1:-}" in
  --prepare) prepare ;;
  --dry-run) dry_run ;;
  --ci) ci_build ;;
  "") on_gpu ;;
  *) echo "usage: $0 [--prepare | --dry-run | --ci]"; exit 2 ;;
esac
