#!/usr/bin/env python3
"""What gym-exporter's memory sampling costs a big process: the latency of
its mmap/munmap calls (which wait while smaps_rollup holds its memory lock).

A target process touches --gib GiB of its own memory, then maps, touches and
unmaps 1 MiB in a loop, timing each round. Three phases of --seconds each:
alone; a configured target of gym-exporter under the defaults (the PSS stall
budget); the same with `pss: true` (PSS read at every 5 s sample, as before
the budget). Prints each phase's worst and 99.9th percentile round, and what
the exporter said of its PSS reads and skips.

    python3 bench/pss_stall.py [--build build-release] [--gib 8] [--seconds 30]
"""
import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from exporter_run import Exporter

TARGET = r"""
import mmap, sys, time
size = int(sys.argv[1]) << 30
big = mmap.mmap(-1, size)
for off in range(0, size, 4096):
    big[off] = 1
print("ready", flush=True)
worst, rounds, lat = 0.0, 0, []
next_report = time.monotonic() + 1
while True:
    t0 = time.perf_counter()
    m = mmap.mmap(-1, 1 << 20)
    m[0] = 1
    m.close()
    lat.append(time.perf_counter() - t0)
    if time.monotonic() >= next_report:
        print(" ".join(f"{x:.6f}" for x in lat), flush=True)
        lat = []
        next_report += 1
"""


def pss_counts(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"gym_server_memory_pss_(reads|skips)_total\{([^}]*)\} (\S+)", line)
        if m:
            reason = re.search(r'reason="(\w+)"', m.group(2))
            out[reason.group(1) if reason else m.group(1)] = float(m.group(3))
        m = re.match(r"gym_exporter_pss_stall_seconds_per_gib (\S+)", line)
        if m:
            out["per_gib_ms"] = float(m.group(1)) * 1000
    return out


def phase(target, seconds):
    lat = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        line = target.stdout.readline()
        if not line:
            break
        lat += [float(x) for x in line.split()]
    lat.sort()
    return lat[-1] * 1000, lat[int(len(lat) * 0.999)] * 1000, len(lat)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--gib", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    registry = tempfile.mkdtemp(prefix="gym-bench-pss-", dir="/dev/shm")
    target = subprocess.Popen([sys.executable, "-c", TARGET, str(a.gib)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        print(f"a target with {a.gib} GiB resident, mmap+touch+munmap of 1 MiB in a loop, "
              f"{a.seconds:g} s a phase:")
        worst, p999, n = phase(target, a.seconds)
        print(f"  alone: worst {worst:.2f} ms, 99.9% {p999:.3f} ms ({n} rounds)", flush=True)
        for name, pss in (("defaults (stall budget)", "auto"), ("pss: true", "true")):
            config = ("servers:\n  targets:\n    - {name: big, server_type: model_server, "
                      f"pid: {target.pid}, pss: {pss}}}\n")
            with Exporter(a.build, registry, config) as ex:
                worst, p999, n = phase(target, a.seconds)
                counts = pss_counts(ex.port) if ex.port else {}
            said = ", ".join(f"{k} {v:g}" for k, v in sorted(counts.items()))
            print(f"  exporter, {name}: worst {worst:.2f} ms, 99.9% {p999:.3f} ms ({n} rounds); "
                  f"exporter: {said}", flush=True)
    finally:
        target.kill()
        target.wait()
        shutil.rmtree(registry, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
