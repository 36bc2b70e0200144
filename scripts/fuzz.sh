#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer, AddressSanitizer,
# UndefinedBehaviorSanitizer) in build-fuzz/ and runs each one for SECONDS
# (default 60), starting from the seed corpus in fuzz/corpus/<target>.
# New inputs go to build-fuzz/corpus/<target>; crashes to build-fuzz/crashes/.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(segment_reader config procfs http_request)

"$root/scripts/deps.sh"
build="$root/build-fuzz"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DGYM_FUZZ=ON \
  -DGYM_SANITIZE=address,undefined,fuzzer-no-link -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGYM_BUILD_TESTS=OFF -DGYM_BUILD_BENCHMARKS=OFF -DGYM_WERROR="${GYM_WERROR:-OFF}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/%/_fuzz}" >/dev/null

status=0
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/crashes/$t"
  echo "fuzz: $t for ${seconds}s"
  if ! ASAN_OPTIONS=detect_leaks=1 "$build/fuzz/${t}_fuzz" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$build/crashes/$t/" "$build/corpus/$t" "$root/fuzz/corpus/$t" \
      2>"$build/$t.log"; then
    echo "fuzz: $t FAILED (see $build/$t.log and $build/crashes/$t/)"
    tail -30 "$build/$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov: " "$build/$t.log" | tail -2
  fi
done
exit $status
