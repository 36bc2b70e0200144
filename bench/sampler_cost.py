#!/usr/bin/env python3
"""What the per-server collectors (memory, cpu, cgroup) cost the exporter with
N declared servers (1,000 by default): N live processes, each declaring a
server through gym_metrics and holding one limit, sampled by gym-exporter at
its default 5 s interval; the exporter's CPU as a share of one core, with the
default configuration (PSS within its stall and CPU budgets), with PSS read
at every sample as before the budgets (memory.pss_max_cpu_fraction: 1), with
the memory collector off (the cpu and cgroup collectors alone) and with all
three off. Measure over at least one PSS interval (--seconds 60).
--servers takes a list (10,100,1000): each count is measured in turn, to see
the cost grow with the servers; --cases picks cases by number (0: defaults).

    PYTHONPATH=build-release/python /usr/bin/python3 bench/sampler_cost.py \\
        [--build build-release] [--servers 10,100,1000] [--seconds 60] [--cases 0,1]
"""
import argparse
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import urllib.request

from exporter_run import Exporter


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_servers(registry, n):
    """N processes that each declared a server and hold a limit, until killed."""
    os.environ["GYM_METRICS_DIR"] = registry
    import gym_metrics
    pids = []
    r, w = os.pipe()
    for i in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            gym_metrics.declare_server(f"server_{i}", "resources_server")
            sem = gym_metrics.MeteredSemaphore(4, "resources_server", "verifiers")  # noqa: F841
            os.write(w, b"x")
            os.close(w)
            signal.pause()
            os._exit(0)
        pids.append(pid)
    os.close(w)
    got = 0
    while got < n:
        got += len(os.read(r, 4096))
    os.close(r)
    return pids


def exporter_cpu(build, registry, config_text, seconds):
    """% of one core the exporter used over `seconds` after a warm-up, and the
    memory sample's duration it reported last."""
    with Exporter(build, registry, config_text) as ex:
        time.sleep(6)  # the first samples (PSS included) and the reader's first view
        before, t0 = cpu_seconds(ex.proc.pid), time.time()
        time.sleep(seconds)
        used = cpu_seconds(ex.proc.pid) - before
        took = None
        if ex.port:
            text = urllib.request.urlopen(f"http://127.0.0.1:{ex.port}/metrics",
                                          timeout=30).read()
            m = re.search(rb"^gym_exporter_memory_sample_duration_seconds (\S+)$", text, re.M)
            took = float(m.group(1)) if m else None
        return 100 * used / (time.time() - t0), took


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--servers", default="1000")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--cases", default="0,1,2,3")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(a.build), "python"))
    cases = [
        ("defaults (PSS within its budgets)", ""),
        ("PSS at every sample (no CPU budget)", "memory:\n  pss_max_cpu_fraction: 1\n"),
        ("memory collector off (cpu, cgroup)", "memory:\n  enabled: false\n"),
        ("all three off (the registry alone)",
         "memory:\n  enabled: false\ncpu:\n  enabled: false\ncgroup:\n  enabled: false\n"),
    ]
    picked = [cases[int(i)] for i in a.cases.split(",")]
    for servers in (int(n) for n in a.servers.split(",")):
        registry = tempfile.mkdtemp(prefix="gym-bench-sampler-", dir="/dev/shm")
        pids = start_servers(registry, servers)
        try:
            print(f"{servers} declared servers, {a.seconds:g} s each:")
            for name, text in picked:
                cpu, took = exporter_cpu(a.build, registry, text, a.seconds)
                extra = f", memory sample {took * 1000:.0f} ms" if took else ""
                print(f"  {name}: {cpu:.2f}% of a core ({cpu * 1000 / servers:.2f}% per 1,000 "
                      f"servers){extra}", flush=True)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            for pid in pids:
                os.waitpid(pid, 0)
            shutil.rmtree(registry, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
