"""One registry directory for the test session (the library reads
$GYM_METRICS_DIR once per process), read back through gym-exporter --once.
Tests use limit names of their own, so they do not see each other."""
import atexit
import os
import re
import shutil
import subprocess
import tempfile

import pytest

REGISTRY = tempfile.mkdtemp(prefix="gym-pytest-", dir="/dev/shm")
atexit.register(shutil.rmtree, REGISTRY, True)
os.environ["GYM_METRICS_DIR"] = REGISTRY
BUILD = os.environ.get("GYM_BUILD_DIR",
                       os.path.join(os.path.dirname(__file__), "..", "..", "build"))
EXPORTER = os.path.join(BUILD, "exporter", "gym-exporter")

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(registry=REGISTRY):
    """{(name, frozenset of (label, value)): value} of one exposition."""
    out = subprocess.run([EXPORTER, "--once", f"--registry.dir={registry}"], check=True,
                         capture_output=True, text=True).stdout
    samples = {}
    for line in out.splitlines():
        m = SAMPLE.match(line)
        if m:
            labels = frozenset(LABEL.findall(m.group(2) or ""))
            samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def value(samples, name, **labels):
    """The sample of `name` whose labels include `labels`; None if none, and
    the sum if several match."""
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= set(ls)]
    return sum(found) if found else None


@pytest.fixture
def registry():
    return REGISTRY
