#!/usr/bin/env python3
"""What following the kernel's process events costs the exporter: a
configured server (a small C-free forker: os.fork + os._exit) forks
--rate children a second (1,000 by default), each exiting at once, for
--seconds; the exporter's CPU as a share of one core is measured with the
deaths collector on (it follows every fork, exec and exit on the host) and
off (deaths.enabled: false), beside the same forking, in the same run.
Counted deaths (gym_server_process_exits_total) and lost events are printed
too: at the rate asked, none should be lost.

    /usr/bin/python3 bench/fork_storm.py [--build build-release] [--rate 1000] [--seconds 20]
"""
import argparse
import os
import re
import shutil
import signal
import tempfile
import time
import urllib.request

from exporter_run import Exporter
from sampler_cost import cpu_seconds


def forker(rate):
    """A process that forks `rate` children a second until killed."""
    pid = os.fork()
    if pid:
        return pid
    period = 1.0 / rate
    next_at = time.monotonic()
    while True:
        c = os.fork()
        if c == 0:
            os._exit(0)
        os.waitpid(c, 0)
        next_at += period
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def scrape(port, family):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?name[]={family}").read()
    return sum(float(v) for v in re.findall(rf"^{family}(?:{{[^}}]*}})? (\S+)$",
                                            text.decode(), re.M))


def run(build, registry, rate, seconds, deaths_on):
    server = forker(rate)
    config = (f"servers:\n  targets:\n    - name: storm\n      server_type: resources_server\n"
              f"      pid: {server}\n"
              + ("" if deaths_on else "deaths:\n  enabled: false\n"))
    try:
        with Exporter(build, registry, config) as ex:
            time.sleep(1)
            first = scrape(ex.port, "gym_server_process_exits_total") if deaths_on else 0
            before = cpu_seconds(ex.proc.pid)
            t0 = time.monotonic()
            time.sleep(seconds)
            elapsed = time.monotonic() - t0
            share = (cpu_seconds(ex.proc.pid) - before) / elapsed
            counted = scrape(ex.port, "gym_server_process_exits_total") - first if deaths_on else 0
            lost = scrape(ex.port, "gym_exporter_process_events_lost_total") if deaths_on else 0
    finally:
        os.kill(server, signal.SIGKILL)
        os.waitpid(server, 0)
    return share, counted / seconds, lost


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    a = ap.parse_args()
    registry = tempfile.mkdtemp(prefix="gym-bench-storm-", dir="/dev/shm")
    try:
        off, _, _ = run(a.build, registry, a.rate, a.seconds, False)
        on, counted, lost = run(a.build, registry, a.rate, a.seconds, True)  # counted: per second
    finally:
        shutil.rmtree(registry, ignore_errors=True)
    print(f"forks a second asked: {a.rate}, made and counted: {counted:.0f} "
          f"(events lost: {lost:.0f}), over {a.seconds:g} s")
    print(f"exporter CPU, deaths off: {off * 100:.2f}% of a core")
    print(f"exporter CPU, deaths on:  {on * 100:.2f}% of a core (+{(on - off) * 100:.2f} points)")
    if counted:
        print(f"per 1,000 forks a second: {(on - off) * 100 * 1000 / counted:.2f}% of a core")


if __name__ == "__main__":
    main()
