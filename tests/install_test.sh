#!/usr/bin/env bash
# What a user installs: cmake --install (library, headers, pkg-config file,
# CMake package), a C program built with pkg-config against it, and the
# Python package with pip against it.
#   tests/install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
source="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
test -f "$work/prefix/lib/cmake/gymmetrics/gymmetrics-config.cmake"

# The installed programs find their libraries wherever the prefix is (no
# LD_LIBRARY_PATH): their runtime path is relative to the binary.
"$work/prefix/bin/gym-exporter" --version
json="$("$work/prefix/bin/gym-stat" --registry.dir="$work/empty" --json)"
grep -q '"schema_version":1' <<<"$json"
"$work/prefix/bin/gym-demo" --registry.dir="$work/demo" --duration=1 >/dev/null 2>&1
once="$("$work/prefix/bin/gym-exporter" --once --registry.dir="$work/demo")"
grep -q '^gym_resources_operation' <<<"$once"
echo "installed programs ok"

cat > "$work/use.c" <<'C'
#include <gym_metrics.h>
#include <stdio.h>
int main(void) {
  gym_limit* l = NULL;
  if (gym_limit_open("other", "install_check", NULL, 1, -1.0, &l) != GYM_OK) return 1;
  if (gym_limit_acquired(l) != GYM_OK || gym_limit_active(l) != 1) return 2;
  gym_limit_close(l);
  puts("c ok");
  return 0;
}
C
cc -std=c11 "$work/use.c" $(pkg-config --cflags --libs gymmetrics) -o "$work/use"
GYM_METRICS_DIR="$work/registry" LD_LIBRARY_PATH="$work/prefix/lib" "$work/use"

cp -r "$source/python" "$work/python"
/usr/bin/python3 -m pip install -q --no-build-isolation --break-system-packages \
  --target "$work/site" "$work/python" 2>/dev/null
GYM_METRICS_DIR="$work/registry" LD_LIBRARY_PATH="$work/prefix/lib" PYTHONPATH="$work/site" \
  /usr/bin/python3 -c '
import asyncio, gym_metrics
async def main():
    s = gym_metrics.MeteredSemaphore(2, "agent_server", "install_check")
    async with s:
        assert s.active == 1
asyncio.run(main())
print("python ok")'
