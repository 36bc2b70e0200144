#!/usr/bin/env bash
# What a user installs: cmake --install (library, headers, pkg-config file,
# CMake package), a C program built with pkg-config against it, and the
# Python package with pip (self-contained) into fresh venvs.
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

# The documented C++ API (docs/api.md), and nothing else, against the
# installed headers: a change that breaks it fails here.
cat > "$work/use.cc" <<'CC'
#include <gym/metered_semaphore.h>
#include <gym/resources_operation.h>
#include <gym/server_identity.h>

#include <chrono>
#include <cstdio>
#include <optional>

int main() {
  gym::declare_server("cpp_api_check", "resources_server");
  if (!gym::declared_server() || gym::declared_server()->name != "cpp_api_check") return 1;
  gym::MeteredSemaphore s(2, gym::Component::kResourcesServer, "cpp_api_check", std::nullopt,
                          std::chrono::milliseconds(10));
  {
    gym::SemaphoreGuard g(s);
    if (s.active() != 1 || s.limit() != 2 || s.queued() != 0) return 2;
  }
  {
    gym::ResourcesOperation op(s, gym::Operation::kVerify, gym::Executor::kSubprocess, {},
                               gym::OperationMetrics::process());
    op.set_outcome(gym::Outcome::kTimeout);
    if (op.outcome() != gym::Outcome::kTimeout) return 3;
  }
  s.acquire();
  s.acquire();
  try {
    s.acquire();
    return 4;
  } catch (const gym::AdmissionTimeout&) {
  }
  s.release();
  s.release();
  std::puts("c++ ok");
  return 0;
}
CC
c++ -std=c++20 "$work/use.cc" $(pkg-config --cflags --libs gymmetrics) -o "$work/use_cc"
GYM_METRICS_DIR="$work/registry-cc" LD_LIBRARY_PATH="$work/prefix/lib" "$work/use_cc"
once="$("$build/exporter/gym-exporter" --once --registry.dir="$work/registry-cc")"
grep -q '^gym_resources_operation_duration_seconds_count{nemo_gym_resources_executor="subprocess",nemo_gym_resources_operation="verify",nemo_gym_resources_operation_outcome="timeout",nemo_gym_server_name="cpp_api_check"} 1$' <<<"$once" ||
  { echo "the exporter does not see the C++ API program's operation" >&2; echo "$once" >&2; exit 1; }
grep -q '^gym_concurrency_admission_timeouts_total{.*nemo_gym_concurrency_limit_name="cpp_api_check".*} 1$' <<<"$once" ||
  { echo "the exporter does not see the C++ API program's admission timeout" >&2; exit 1; }

# The Python package, self-contained: pip compiles the library into the
# extension from the source tree (copied, so that the build leaves nothing
# in the checkout). A fresh venv sees the system's setuptools and wheel
# (--system-site-packages: only Debian's archive is reachable here).
mkdir "$work/src"
cp -r "$source/lib" "$source/python" "$source/CMakeLists.txt" "$work/src/"
rm -rf "$work/src/python/build" "$work/src/python"/*.egg-info
check_python='
import asyncio, gym_metrics
async def main():
    gym_metrics.declare_server("pip_check", "resources_server", runtime=True)
    s = gym_metrics.MeteredSemaphore(2, "agent_server", "install_check")
    async with s:
        assert s.active == 1
    async with gym_metrics.resources_operation(s, "tool", "inline"):
        pass
    await asyncio.sleep(0.1)
    print(gym_metrics.__version__)
asyncio.run(main())'

# Offline without wheel (a venv of Debian's 3.11 has setuptools 66 and no
# wheel, as pyenv's has): one clear line naming what is missing, not
# setuptools' "invalid command 'bdist_wheel'".
/usr/bin/python3 -m venv "$work/venv-nowheel"
if ! "$work/venv-nowheel/bin/python" -c 'import wheel' 2>/dev/null &&
  ! "$work/venv-nowheel/bin/python" -c 'import setuptools.command.bdist_wheel' 2>/dev/null; then
  if out="$("$work/venv-nowheel/bin/pip" install --no-build-isolation "$work/src/python" 2>&1)"; then
    echo "pip install without wheel succeeded where it cannot" >&2
    exit 1
  fi
  grep -q "gym-metrics: building needs the 'wheel' package" <<<"$out" ||
    { echo "no clear error without wheel:" >&2; echo "$out" >&2; exit 1; }
  echo "without wheel: one clear line"
fi

# One pip command into a fresh venv; then a server writes and the exporter
# reads what it wrote. The extension needs no library of ours.
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install -q --no-build-isolation "$work/src/python"
so="$(ls "$work"/venv/lib/python3*/site-packages/gym_metrics/_gym_metrics*.so)"
if ldd "$so" | grep -q gymmetrics; then echo "the extension links libgymmetrics" >&2; exit 1; fi
nm -D --defined-only "$so" | grep -q ' T PyInit__gym_metrics$'
[ "$(nm -D --defined-only "$so" | wc -l)" -le 2 ] || { echo "the extension exports more than PyInit" >&2; exit 1; }
test -f "$(dirname "$so")/py.typed" && test -f "$(dirname "$so")/_gym_metrics.pyi"
venv_version="$(cd "$work" && GYM_METRICS_DIR="$work/registry-pip" "$work/venv/bin/python" -c "$check_python")"
once="$("$build/exporter/gym-exporter" --once --registry.dir="$work/registry-pip")"
grep -q '^gym_resources_operation_duration_seconds_count{nemo_gym_resources_executor="inline",nemo_gym_resources_operation="tool",nemo_gym_resources_operation_outcome="ok",nemo_gym_server_name="pip_check"} 1$' <<<"$once" ||
  { echo "the exporter does not see the pip-installed package's writes" >&2; echo "$once" >&2; exit 1; }
grep -q '^gym_python_event_loop_lag_seconds_count{nemo_gym_server_name="pip_check"} [1-9]' <<<"$once"
echo "pip install into a venv ok"

# A wheel built from the same tree installs into another venv.
"$work/venv/bin/pip" wheel -q --no-build-isolation --no-deps -w "$work/dist" "$work/src/python"
/usr/bin/python3 -m venv --system-site-packages "$work/venv2"
"$work/venv2/bin/pip" install -q "$work"/dist/gym_metrics-*.whl
wheel_version="$(cd "$work" && GYM_METRICS_DIR="$work/registry-pip" "$work/venv2/bin/python" -c "$check_python")"
echo "wheel ok"

# python/ without the library's sources beside it: a clear error.
cp -r "$work/src/python" "$work/python-alone"
rm -rf "$work/python-alone/build" "$work/python-alone"/*.egg-info
if out="$("$work/venv/bin/pip" install --no-build-isolation "$work/python-alone" 2>&1)"; then
  echo "pip install without the library's sources succeeded" >&2
  exit 1
fi
grep -q "the library's sources are not beside this package" <<<"$out" || { echo "$out" >&2; exit 1; }
echo "python/ alone: clear error"

# One version number: CMake's, which the library, the exporter and the Python
# package all carry.
cmake_version="$(sed -n 's/^project(gym-exporter VERSION \([0-9.]*\).*/\1/p' "$source/CMakeLists.txt")"
lib_version="$(pkg-config --modversion gymmetrics)"
exporter_version="$("$work/prefix/bin/gym-exporter" --version | awk '{print $3}')"
python_version="$("$work/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("gym-metrics"))')"
echo "versions: cmake $cmake_version lib $lib_version exporter $exporter_version python $python_version" \
  "__version__ $venv_version (wheel $wheel_version)"
[ -n "$cmake_version" ] && [ "$lib_version" = "$cmake_version" ] &&
  [ "$exporter_version" = "$cmake_version" ] && [ "$python_version" = "$cmake_version" ] &&
  [ "$venv_version" = "$cmake_version" ] && [ "$wheel_version" = "$cmake_version" ] ||
  { echo "the versions differ" >&2; exit 1; }
