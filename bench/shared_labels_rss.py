#!/usr/bin/env python3
"""The exporter's resident memory and threads with many writers that share
their labels (each holds one slot of the same limit, as the workers of one
server do): after start, after 5 scrapes, and the peak (VmHWM), with the
series count it served.

    /usr/bin/python3 bench/shared_labels_rss.py [--build build-release]
        [--writers-build build] [--writers 1000]

The writers are tests/gym_hold_limit of a build with tests (--writers-build);
the exporter is --build's.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--writers-build", default="build")
    ap.add_argument("--writers", type=int, default=1000)
    a = ap.parse_args()
    registry = tempfile.mkdtemp(prefix="gym-bench-rss-", dir="/dev/shm")
    env = {**os.environ, "GYM_METRICS_DIR": registry}
    writers = []
    exporter = None
    try:
        for _ in range(a.writers):
            writers.append(subprocess.Popen(
                [os.path.join(a.writers_build, "tests", "gym_hold_limit"), "agent_server",
                 "shared", "100000", "1"], env=env, stdout=subprocess.PIPE, text=True))
        for w in writers:
            assert w.stdout.readline().strip() == "held"
        log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        exporter = subprocess.Popen([os.path.join(a.build, "exporter", "gym-exporter"),
                                     f"--registry.dir={registry}",
                                     "--web.listen-address=127.0.0.1:0"], stderr=log)
        port = None
        for _ in range(500):
            m = re.search(r"\(port (\d+)\)", open(log.name).read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.02)
        time.sleep(1)
        start = status(exporter.pid)
        url = f"http://127.0.0.1:{port}/metrics"
        for _ in range(5):
            body = urllib.request.urlopen(url, timeout=60).read().decode()
        after = status(exporter.pid)
        active = re.search(r'^gym_concurrency_active\{[^}]*"shared"[^}]*\} (\S+)$', body, re.M)
        lines = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
        print(f"{a.writers} writers sharing one limit's labels: exporter RSS at start "
              f"{start['VmRSS']}, after 5 scrapes {after['VmRSS']}, peak {after['VmHWM']}; "
              f"threads {after['Threads']}; {lines} exposition lines, "
              f"gym_concurrency_active {active.group(1) if active else '?'}")
    finally:
        if exporter is not None:
            exporter.send_signal(signal.SIGTERM)
            exporter.wait()
        for w in writers:
            w.kill()
        for w in writers:
            w.wait()
        shutil.rmtree(registry, ignore_errors=True)


if __name__ == "__main__":
    main()
