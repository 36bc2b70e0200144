#!/usr/bin/env python3
"""Sampling a 200-process tree, in one run: gym-exporter's sampler (from
memory_bench, with its floor: the same procfs files read once) against
psutil, and the exporter's CPU use with 100 targets at a 1 s interval.

    /usr/bin/python3 bench/memory_compare.py [--build build]

Run it with Debian's /usr/bin/python3, which has python3-psutil.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import psutil


def cpp_medians(build, repetitions):
    out = subprocess.run(
        [f"{build}/bench/memory_bench", "--benchmark_format=json",
         f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true"],
        check=True, capture_output=True, text=True).stdout
    return {r["run_name"]: r["real_time"] for r in json.loads(out)["benchmarks"]
            if r.get("aggregate_name") == "median"}


def psutil_ms(root, pss, rounds=15):
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        p = psutil.Process(root)
        procs = [p] + p.children(recursive=True)
        for q in procs:
            q.memory_full_info() if pss else q.memory_info()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, len(procs)


def exporter_cpu(build, pids, seconds):
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as cfg:
        cfg.write("memory:\n  interval_seconds: 1\n  targets:\n")
        for i, pid in enumerate(pids):
            cfg.write(f"    - {{name: t{i}, server_type: resources_server, pid: {pid}}}\n")
    registry = tempfile.mkdtemp(prefix="gym-bench-cpu-", dir="/dev/shm")
    exporter = subprocess.Popen(
        [f"{build}/exporter/gym-exporter", f"--config.file={cfg.name}",
         f"--registry.dir={registry}", "--web.listen-address=127.0.0.1:0"],
        stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        proc = psutil.Process(exporter.pid)
        before = proc.cpu_times()
        time.sleep(seconds)
        after = proc.cpu_times()
        used = (after.user + after.system) - (before.user + before.system)
        return 100.0 * used / seconds
    finally:
        exporter.send_signal(signal.SIGTERM)
        exporter.wait()
        os.unlink(cfg.name)
        shutil.rmtree(registry, ignore_errors=True)  # the exporter's totals file too


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--cpu-seconds", type=float, default=10)
    a = ap.parse_args()
    cpp = cpp_medians(a.build, a.repetitions)
    holder = subprocess.Popen([f"{a.build}/bench/memory_bench", "--hold-tree=200"],
                              stdout=subprocess.PIPE, text=True)
    root = int(holder.stdout.readline())
    try:
        py_pss, n = psutil_ms(root, True)
        py_rss, _ = psutil_ms(root, False)
        for kind, py in (("pss", py_pss), ("rss", py_rss)):
            gym = cpp[f"sample_{kind}_gym"]
            floor = cpp[f"sample_{kind}_floor"]
            print(f"{kind}: {n} processes  gym {gym:.2f} ms  floor {floor:.2f} ms"
                  f" (ratio {gym / floor:.2f})  psutil {py:.2f} ms (psutil / gym {py / gym:.1f}x)")
        children = [c.pid for c in psutil.Process(root).children()][:100]
        cpu = exporter_cpu(a.build, children, a.cpu_seconds)
        print(f"gym-exporter with {len(children)} targets (PSS on) at a 1 s interval:"
              f" {cpu:.2f}% of one core over {a.cpu_seconds:.0f} s")
    finally:
        os.killpg(root, signal.SIGKILL)
        holder.send_signal(signal.SIGTERM)
        holder.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
