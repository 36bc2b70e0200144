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
# What a local pip install may have left in the source tree is not the package.
rm -rf "$work/python/build" "$work/python"/*.egg-info
check_python='
import asyncio, gym_metrics
async def main():
    s = gym_metrics.MeteredSemaphore(2, "agent_server", "install_check")
    async with s:
        assert s.active == 1
    async with gym_metrics.resources_operation(s, "tool", "inline"):
        pass
asyncio.run(main())
print("python ok")'

# Without pkg-config's help, a clear error rather than a missing header.
if out="$(PKG_CONFIG_PATH="$work/none" PKG_CONFIG_LIBDIR="$work/none" /usr/bin/python3 -m pip \
  install --no-build-isolation --break-system-packages --target "$work/nowhere" \
  "$work/python" 2>&1)"; then
  echo "pip install without the library succeeded" >&2
  exit 1
fi
grep -q "pkg-config cannot find libgymmetrics" <<<"$out" || { echo "$out" >&2; exit 1; }
echo "missing library: clear error"

# The system Python, and a venv that sees the system's packages (setuptools,
# wheel): each finds the library with no LD_LIBRARY_PATH, and has the types.
/usr/bin/python3 -m pip install -q --no-build-isolation --break-system-packages \
  --target "$work/site" "$work/python" 2>/dev/null
GYM_METRICS_DIR="$work/registry" PYTHONPATH="$work/site" /usr/bin/python3 -c "$check_python"
test -f "$work/site/gym_metrics/py.typed"
test -f "$work/site/gym_metrics/_gym_metrics.pyi"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install -q --no-build-isolation "$work/python" 2>/dev/null
GYM_METRICS_DIR="$work/registry" "$work/venv/bin/python" -c "$check_python"
echo "venv ok"

# One version number: CMake's, which the library, the exporter and the Python
# package all carry.
cmake_version="$(sed -n 's/^project(gym-exporter VERSION \([0-9.]*\).*/\1/p' "$source/CMakeLists.txt")"
lib_version="$(pkg-config --modversion gymmetrics)"
exporter_version="$("$work/prefix/bin/gym-exporter" --version | awk '{print $3}')"
python_version="$("$work/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("gym-metrics"))')"
echo "versions: cmake $cmake_version lib $lib_version exporter $exporter_version python $python_version"
[ -n "$cmake_version" ] && [ "$lib_version" = "$cmake_version" ] &&
  [ "$exporter_version" = "$cmake_version" ] && [ "$python_version" = "$cmake_version" ] ||
  { echo "the versions differ" >&2; exit 1; }
