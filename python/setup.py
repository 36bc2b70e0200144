"""Builds the extension against an installed libgymmetrics, found with
pkg-config (cmake --install build [--prefix P]; for a prefix pkg-config does
not search, PKG_CONFIG_PATH=P/lib/pkgconfig). Offline, with Debian's
setuptools: pip install --no-build-isolation ./python

The extension finds the library where pkg-config said it is (a runtime path
to its libdir), with no LD_LIBRARY_PATH. The package's version is the
library's (CMake's project version): the project has one version number."""
import shlex
import subprocess

from setuptools import Extension, setup


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "gymmetrics"], check=True,
                             capture_output=True, text=True)
    except OSError as e:
        raise SystemExit(f"gym-metrics: cannot run pkg-config ({e}); install it "
                         "(apt-get install pkg-config)") from None
    except subprocess.CalledProcessError as e:
        raise SystemExit(
            "gym-metrics: pkg-config cannot find libgymmetrics: install it first "
            "(cmake --install build, or --prefix P and then PKG_CONFIG_PATH=P/lib/pkgconfig). "
            f"pkg-config said: {e.stderr.strip()}") from None
    return out.stdout.strip()


libdir = pkg_config("--variable=libdir")
setup(version=pkg_config("--modversion"), ext_modules=[Extension(
    "gym_metrics._gym_metrics", ["gym_metrics/_gym_metrics.c"],
    extra_compile_args=shlex.split(pkg_config("--cflags")),
    extra_link_args=shlex.split(pkg_config("--libs")) + [f"-Wl,-rpath,{libdir}"])])
