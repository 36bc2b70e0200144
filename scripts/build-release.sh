#!/usr/bin/env bash
# A plain Release build in build-release/, as a user or packager makes it:
#   cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release && cmake --build build-release
# (CI runs it with GYM_WERROR=ON, so that a Release-only warning is seen.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/deps.sh"
cmake -S "$root" -B "$root/build-release" -DCMAKE_BUILD_TYPE=Release \
  -DGYM_WERROR="${GYM_WERROR:-OFF}" >/dev/null
cmake --build "$root/build-release" -j "$(nproc)"
echo "release build: OK"
