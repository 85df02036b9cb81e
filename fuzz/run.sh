#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/fuzz_NAME.cpp) into build-fuzz/ with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, then runs each on its committed seed corpus (fuzz/corpus/NAME) and fuzzes it.
#
#   fuzz/run.sh --brief            every target: its seeds, then a fixed number of executions from a fixed
#                                  seed (what CI runs: the same inputs every time, so a CI failure reproduces)
#   fuzz/run.sh --long N [NAME…]   every target (or those named): at least N executions from a random seed
#
# Inputs the fuzzer finds go to build-fuzz/corpus/NAME (scratch; the committed corpus stays as it is),
# a crashing or hanging input to build-fuzz/findings/NAME/, each run's log to build-fuzz/logs/NAME.log.
# Exits non-zero when any target crashed, tripped a sanitizer, hung (10 s for one input; 60 s in --long runs) or ran out of
# memory (2 GB); the summary says which, and the log has the report. Reproduce one finding with
# build-fuzz/fuzz/fuzz_NAME build-fuzz/findings/NAME/crash-…
#
# Clang 16 (Debian's clang-16): clang 14 cannot compile the library, whose fp16 kernels use _Float16,
# which clang supports on x86 from version 15 on. Installed here when missing, as scripts/setup.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case "$mode" in
  --brief) runs=100000; seed=1; shift ;;
  --long) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "usage: fuzz/run.sh --long N [NAME...]" >&2; exit 2; }
          runs=$2; seed=0; shift 2 ;;  # libFuzzer takes seed 0 as "pick one"; the log records it
  *) echo "usage: fuzz/run.sh --brief | --long N [NAME...]" >&2; exit 2 ;;
esac

llvm=16
packages=(clang-$llvm libclang-rt-$llvm-dev libomp-$llvm-dev llvm-$llvm)  # compiler, libFuzzer + sanitizers, OpenMP, symbolizer
scripts/install-packages.sh fuzz "${packages[@]}"

# -O1 -g without NDEBUG: asserts stay on, and the build is quick.
build=build-fuzz
CC=clang-$llvm CXX=clang++-$llvm cmake -S . -B $build -G Ninja -DATTEND_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DATTEND_BUILD_TESTS=OFF -DATTEND_BUILD_BENCH=OFF -DATTEND_BUILD_CLI=OFF \
  -DATTEND_NATIVE=ON >/dev/null
cmake --build $build -j "$(nproc)"

names=("$@")
if ((${#names[@]} == 0)); then
  for f in fuzz/fuzz_*.cpp; do n=${f#fuzz/fuzz_}; names+=("${n%.cpp}"); done
fi

export OMP_NUM_THREADS=1  # the parsers are serial; encode_batch's threads would only add noise
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# ASan checks stack use after return (clang's default) with a fake stack per thread, which it walks at every thrown
# exception; at its default size (2^20 bytes for the main thread) that walk took 62% of the gguf target's time, whose
# bad inputs each end in an attend::Error. A 2^16-byte fake stack keeps the check and halves the time per input.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_stack_use_after_return=1:max_uar_stack_size_log=16}
export ASAN_SYMBOLIZER_PATH=/usr/bin/llvm-symbolizer-$llvm  # stacks with file and line
failed=()
for name in "${names[@]}"; do
  target=$build/fuzz/fuzz_$name
  [[ -x $target ]] || { echo "fuzz: no target fuzz_$name" >&2; exit 2; }
  scratch=$build/corpus/$name findings=$build/findings/$name log=$build/logs/$name.log
  [[ $mode == --brief ]] && rm -rf "$scratch"  # start where a clean clone starts, as CI does
  mkdir -p "$scratch" "$findings" "$(dirname "$log")"
  # libFuzzer's timeout is wall time: a long run at low priority beside a build can be starved past 10 s on an
  # input that runs in milliseconds (two such reports on 2026-11-26, each input 2-22 ms alone), so long runs
  # allow 60 s, which a real hang still passes.
  timeout=10
  [[ $mode == --long ]] && timeout=60
  options=(-timeout=$timeout -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$findings/")
  [[ -f fuzz/$name.dict ]] && options+=(-dict="fuzz/$name.dict")
  options+=(-runs="$runs" -seed="$seed")
  start=$(date +%s)
  status=ok
  "$target" "${options[@]}" "$scratch" "fuzz/corpus/$name" >"$log" 2>&1 || status=FAILED
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  printf 'fuzz: %-16s %s  %s executions in %s s, %s inputs in the corpus\n' "$name" "$status" "${execs:-?}" \
    "$(($(date +%s) - start))" "$(find "$scratch" "fuzz/corpus/$name" -type f | wc -l)"
  if [[ $status != ok ]]; then
    failed+=("$name")
    grep -E "ERROR: |runtime error|SUMMARY|Test unit written|fuzz: " "$log" | head -20 | sed 's/^/    /'
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]}: see $build/logs/ and $build/findings/" >&2
  exit 1
fi
