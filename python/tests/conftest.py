"""One registry directory for the test session (the library reads
$GYM_METRICS_DIR once per process), read back through gym-exporter --once.
Tests use limit names of their own, so they do not see each other."""
import atexit
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

# Named with the test run's prefix (scripts/test.sh checks nothing with it is left).
REGISTRY = tempfile.mkdtemp(prefix=os.environ.get("GYM_TEST_SHM_PREFIX", "gym-test-") + "pytest-",
                            dir="/dev/shm")
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


def parse(text):
    samples = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            samples[(m.group(1), frozenset(LABEL.findall(m.group(2) or "")))] = float(m.group(3))
    return samples


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served_exporter(tmp_path):
    port = free_port()
    p = subprocess.Popen([EXPORTER, f"--registry.dir={REGISTRY}",
                          f"--web.listen-address=127.0.0.1:{port}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=2).read()
            break
        except OSError:
            time.sleep(0.05)
    yield url
    p.terminate()
    p.wait()
