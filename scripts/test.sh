#!/usr/bin/env bash
# Builds the project and runs every test. Installs missing Debian packages first.
#   scripts/test.sh                        plain build in build/
#   scripts/test.sh --sanitize=thread      ThreadSanitizer build in build-thread/
#   scripts/test.sh --sanitize=address,undefined
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sanitize=""
for arg in "$@"; do
  case "$arg" in
    --sanitize=*) sanitize="${arg#--sanitize=}" ;;
    *) echo "usage: $0 [--sanitize=address,undefined|thread]" >&2; exit 2 ;;
  esac
done

"$root/scripts/deps.sh"

build="$root/build"
# GYM_WERROR=ON (set by CI): warnings are errors.
werror="-DGYM_WERROR=${GYM_WERROR:-OFF}"
extra=(-DGYM_BUILD_TESTS=ON -DGYM_BUILD_BENCHMARKS=ON "$werror")
if [ -n "$sanitize" ]; then
  build="$root/build-${sanitize//,/-}"
  extra=(-DGYM_SANITIZE="$sanitize" -DCMAKE_BUILD_TYPE=Debug -DGYM_BUILD_TESTS=ON "$werror")
fi
jobs="$(nproc)"
cmake -S "$root" -B "$build" "${extra[@]}" >/dev/null
cmake --build "$build" -j "$jobs"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp}"
cd "$build"
# The suite must leave nothing in /dev/shm (registries of tests, benchmarks
# and fuzzers are theirs to remove).
shm_before="$(ls -d /dev/shm/gym-* 2>/dev/null | sort || true)"
status=0
ctest --output-on-failure -j "$jobs" || status=$?
left="$(comm -13 <(echo "$shm_before") <(ls -d /dev/shm/gym-* 2>/dev/null | sort || true) |
  grep -v '^/dev/shm/gym-metrics$' || true)"
if [ -n "$left" ]; then
  echo "the test suite left these behind in /dev/shm:" >&2
  echo "$left" >&2
  [ "$status" -ne 0 ] || status=1
fi
exit "$status"
