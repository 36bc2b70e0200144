"""Builds gym_metrics self-contained: the C++ library (../lib/src) is compiled
into the extension itself, so nothing needs to be installed first and the
extension loads no other library of ours (no pkg-config, no
LD_LIBRARY_PATH). Offline, with Debian's setuptools:

    pip install --no-build-isolation ./python
    pip wheel --no-build-isolation --no-deps -w dist ./python

It builds from the project's source tree (python/ beside lib/), which pip
does in place. The package's version is the project's (CMake's
project(... VERSION)): the project has one version number. The .deb
builds the same package with CMake, over the shared libgymmetrics.

With pip's build isolation (pip install ./python, which needs the Python
package index), pip brings setuptools itself. Without it
(--no-build-isolation, offline), setuptools must be in the environment, and
so must wheel for setuptools before 70.1: a missing one is said in one line."""
import glob
import importlib.util
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = os.path.join(ROOT, "lib")


def project_version():
    path = os.path.join(ROOT, "CMakeLists.txt")
    try:
        with open(path) as f:
            m = re.search(r"^project\(gym-exporter VERSION ([0-9.]+)", f.read(), re.M)
    except OSError:
        m = None
    if m is None or not os.path.isdir(os.path.join(LIB, "src")):
        raise SystemExit(
            f"gym-metrics: the library's sources are not beside this package ({LIB}): build it "
            "from the project's source tree (pip install ./python), not from a copy of python/")
    return m.group(1)


def require_wheel():
    """Metadata and wheels need bdist_wheel: setuptools' own from 70.1, the
    wheel package's before. Without either, setuptools says only "invalid
    command 'bdist_wheel'"."""
    if not {"bdist_wheel", "dist_info"} & set(sys.argv[1:]):
        return
    if importlib.util.find_spec("wheel") or importlib.util.find_spec(
            "setuptools.command.bdist_wheel"):
        return
    import setuptools
    raise SystemExit(
        f"gym-metrics: building needs the 'wheel' package, which {sys.executable} lacks "
        f"(setuptools {setuptools.__version__} has no bdist_wheel of its own before 70.1): "
        "pip install wheel, or install with pip's build isolation: pip install ./python")


require_wheel()
VERSION = project_version()
SOURCES = sorted(glob.glob(os.path.join(LIB, "src", "*", "*.cc")))
CXX_FLAGS = ["-std=c++20", "-g0", "-fvisibility=hidden", "-fno-semantic-interposition",
             "-I" + os.path.join(LIB, "include"), "-I" + os.path.join(LIB, "src")]


class BuildExt(build_ext):
    """Compiles the library's C++ sources (in parallel, with C++ flags of
    their own) and links their objects into the extension. The sources are
    outside this directory, which setuptools' declared sources may not be."""

    def build_extension(self, ext):
        out = os.path.join(self.build_temp, "gymmetrics")

        def compile_one(src):
            return self.compiler.compile([src], output_dir=out, extra_postargs=CXX_FLAGS)

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            objects = [o for objs in pool.map(compile_one, SOURCES) for o in objs]
        ext.extra_objects = objects + list(ext.extra_objects or [])
        # The module exports its entry point alone, not the library's or the
        # C++ runtime's inline symbols.
        script = os.path.join(self.build_temp, "gym_metrics.map")
        with open(script, "w") as f:
            f.write("{ global: PyInit__gym_metrics; local: *; };\n")
        ext.extra_link_args = list(ext.extra_link_args) + ["-Wl,--version-script=" + script]
        super().build_extension(ext)


setup(
    version=VERSION,
    cmdclass={"build_ext": BuildExt},
    ext_modules=[Extension(
        "gym_metrics._gym_metrics", ["gym_metrics/_gym_metrics.c", "gym_metrics/_operation.c"],
        include_dirs=[os.path.join(LIB, "include")],
        define_macros=[("GYM_VERSION", f'"{VERSION}"')],
        # The library's C++ needs its runtime.
        extra_link_args=["-lstdc++", "-pthread"],
        depends=SOURCES + ["gym_metrics/_gym_metrics.h"])],
)
