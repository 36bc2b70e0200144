#!/usr/bin/env python3
"""Sampling a 200-process tree, side by side in one run:

- gym-exporter's sampler (from memory_bench, with its floor: the same procfs
  files opened and read once) against psutil, RSS-only and with PSS, and the
  floor of any sampler that scans the host (every /proc/<pid>/stat once);
- CPU per sample of gym-exporter (memory collector only, one target: the
  tree) and of process-exporter (Debian's prometheus-process-exporter, the
  tree's processes as one group, per scrape), RSS-only and with PSS;
- accuracy: gym-exporter's RSS (RSS-only and with PSS) and PSS of the tree
  against the sums of its processes' smaps_rollup read right after;
- the exporter's CPU use with 100 targets at a 1 s interval.

    /usr/bin/python3 bench/memory_compare.py [--build build]

Run it with Debian's /usr/bin/python3, which has python3-psutil; it installs
prometheus-process-exporter (apt-get) when it is missing.
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
        cfg.write("memory:\n  interval_seconds: 1\n  pss_interval_seconds: 0\n  targets:\n")
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


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        return r.read().decode()


def wait_for(port, seconds=20):
    deadline = time.time() + seconds
    while True:
        try:
            return scrape(port)
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def gym_cpu_per_sample(build, root, pss, seconds=5.0, interval=0.1):
    """CPU ms per sample of gym-exporter sampling the tree (memory collector
    only), and the tree as it reported it."""
    d = tempfile.mkdtemp(prefix="gym-bench-sample-", dir="/dev/shm")
    cfg = os.path.join(d, "gym.yml")
    with open(cfg, "w") as f:
        f.write(f"memory:\n  interval_seconds: {interval}\n  pss_interval_seconds: 0\n"
                "  targets:\n"
                f"    - {{name: tree, server_type: resources_server, pid: {root},"
                f" pss: {'true' if pss else 'false'}}}\n"
                "cpu:\n  enabled: false\ncgroup:\n  enabled: false\n")
    port = free_port()
    p = subprocess.Popen([f"{build}/exporter/gym-exporter", f"--config.file={cfg}",
                          f"--registry.dir={d}/registry", f"--web.listen-address=127.0.0.1:{port}"],
                         stderr=subprocess.DEVNULL)
    try:
        wait_for(port)
        time.sleep(1)
        before, t0 = cpu_seconds(p.pid), time.time()
        over0 = overruns(scrape(port))
        time.sleep(seconds)
        after, t1 = cpu_seconds(p.pid), time.time()
        text = scrape(port)
        samples = (t1 - t0) / interval - (overruns(text) - over0)
        return 1000 * (after - before) / samples, text
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


def overruns(text):
    m = re.search(r"^gym_exporter_memory_sample_overruns_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def process_exporter_cpu_per_scrape(root_comm, pss, scrapes=30):
    exe = shutil.which("prometheus-process-exporter")
    if exe is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "prometheus-process-exporter"],
                       check=True, stdout=subprocess.DEVNULL)
        exe = "/usr/bin/prometheus-process-exporter"
    d = tempfile.mkdtemp(prefix="gym-bench-pe-")
    cfg = os.path.join(d, "pe.yml")
    with open(cfg, "w") as f:
        f.write(f"process_names:\n  - name: tree\n    comm: [{root_comm}]\n")
    port = free_port()
    p = subprocess.Popen([exe, f"-config.path={cfg}", "-children=true", "-threads=false",
                          f"-gather-smaps={'true' if pss else 'false'}",
                          f"-web.listen-address=127.0.0.1:{port}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(port)
        scrape(port)
        before = cpu_seconds(p.pid)
        for _ in range(scrapes):
            text = scrape(port)
        after = cpu_seconds(p.pid)
        m = re.search(r'^namedprocess_namegroup_num_procs\{groupname="tree"\} (\S+)$', text, re.M)
        return 1000 * (after - before) / scrapes, int(float(m.group(1))) if m else 0
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


def tree_rollup_sums(root):
    """The tree's RSS and PSS summed from each process's smaps_rollup, bytes."""
    rss = pss = 0
    for q in [psutil.Process(root)] + psutil.Process(root).children(recursive=True):
        with open(f"/proc/{q.pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss"):
                    kb = int(rest.split()[0]) * 1024
                    rss, pss = (rss + kb, pss) if key == "Rss" else (rss, pss + kb)
    return rss, pss


def gym_tree_bytes(text, memory_type):
    m = re.search(r'^gym_server_memory_usage_bytes\{[^}]*memory_type="%s"[^}]*\} (\S+)$'
                  % memory_type, text, re.M)
    return int(float(m.group(1)))


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
        print(f"every process's stat read once (a scan's floor): {cpp['sample_rss_scan_floor']:.2f} ms")
        comm = psutil.Process(root).name()
        for pss in (False, True):
            kind = "pss" if pss else "rss"
            gym_ms, text = gym_cpu_per_sample(a.build, root, pss)
            pe_ms, pe_procs = process_exporter_cpu_per_scrape(comm, pss)
            print(f"{kind}: CPU per sample of the tree: gym-exporter {gym_ms:.2f} ms,"
                  f" process-exporter {pe_ms:.2f} ms per scrape ({pe_procs} processes;"
                  f" process-exporter / gym {pe_ms / gym_ms:.1f}x)")
            rss, pss_sum = tree_rollup_sums(root)
            got_rss = gym_tree_bytes(text, "rss")
            line = f"accuracy ({kind}): gym rss {got_rss} vs smaps_rollup sum {rss} ({got_rss - rss:+d} B)"
            if pss:
                got_pss = gym_tree_bytes(text, "pss")
                line += f", pss {got_pss} vs {pss_sum} ({got_pss - pss_sum:+d} B)"
            print(line)
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
