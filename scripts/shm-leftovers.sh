#!/usr/bin/env bash
# Lists what a test run left in /dev/shm: the directories and files whose
# names start with PREFIX (scripts/test.sh gives every run a prefix of its
# own, GYM_TEST_SHM_PREFIX, which the suite's registries are named with).
# What others make meanwhile (a Gym server's registry, another checkout's
# tests) is not the run's. Exits 1 when something is left, 0 otherwise.
#   scripts/shm-leftovers.sh PREFIX [SHM_DIR]
set -euo pipefail
prefix="${1-}"
shm="${2:-/dev/shm}"
case "$prefix" in
  *[/*?[]* | "")
    echo "usage: $0 PREFIX [SHM_DIR] (a prefix is a plain name start, not '$prefix')" >&2
    exit 2
    ;;
esac
left="$(find "$shm" -mindepth 1 -maxdepth 1 -name "$prefix*" 2>/dev/null | sort)"
[ -z "$left" ] && exit 0
echo "the test suite left these behind in $shm:" >&2
echo "$left" >&2
exit 1
