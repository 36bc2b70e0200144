"""Builds the extension against an installed libgymmetrics
(cmake --install build; pkg-config gymmetrics). Offline, with Debian's
setuptools: pip install --no-build-isolation ./python"""
import shlex
import subprocess

from setuptools import Extension, setup


def pkg_config(flag):
    try:
        out = subprocess.run(["pkg-config", flag, "gymmetrics"], check=True,
                             capture_output=True, text=True).stdout
        return shlex.split(out)
    except (OSError, subprocess.CalledProcessError):
        return []


setup(ext_modules=[Extension(
    "gym_metrics._gym_metrics", ["gym_metrics/_gym_metrics.c"],
    extra_compile_args=pkg_config("--cflags"),
    extra_link_args=pkg_config("--libs") or ["-lgymmetrics"])])
