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
# The suite must leave nothing in /dev/shm: its registries are named with
# this run's own prefix (tests/test_support.h, the Python tests' fixtures),
# and only those are checked, so a Gym server or another checkout's tests
# making registries meanwhile are no failure of ours.
export GYM_TEST_SHM_PREFIX="gym-test-$(date +%s)-$$-"
status=0
ctest --output-on-failure -j "$jobs" || status=$?
"$root/scripts/shm-leftovers.sh" "$GYM_TEST_SHM_PREFIX" || { [ "$status" -ne 0 ] || status=1; }
exit "$status"
