#!/usr/bin/env python3
"""What gym-stat costs with N live writers (1,000 by default, 20 series each,
held by exporter_bench --hold-segments; once with the same 20 series in every
writer, as a Gym host's processes share their limits, and once with 20
distinct series per writer, the stress case): its start (to a first complete
snapshot, `gym-stat --json`), against `gym-exporter --once` on the same
registry in the same run, and its CPU at a 1 s refresh in a full-screen
session (tmux), as a share of one core.

    /usr/bin/python3 bench/gym_stat_cost.py [--build build] [--writers 1000] [--seconds 20]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time


def timed(cmd, rounds):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times), max(times)


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(a, shared):
    stat = os.path.join(a.build, "stat", "gym-stat")
    exporter = os.path.join(a.build, "exporter", "gym-exporter")
    d = tempfile.mkdtemp(prefix="gym-stat-bench-", dir="/dev/shm")
    holder = subprocess.Popen([os.path.join(a.build, "bench", "exporter_bench"),
                               f"--hold-segments={a.writers}", f"--dir={d}"] +
                              (["--shared-labels"] if shared else []),
                              stdout=subprocess.PIPE, text=True)
    session = f"gym-stat-bench-{os.getpid()}"
    shape = "20 series shared by all" if shared else f"{20 * a.writers} distinct series"
    try:
        assert holder.stdout.readline().strip() == "ready"
        # Interleaved rounds: one of each per round.
        stat_t, once_t = [], []
        for _ in range(a.rounds):
            stat_t.append(timed([stat, f"--registry.dir={d}", "--json"], 1)[0])
            once_t.append(timed([exporter, "--once", f"--registry.dir={d}"], 1)[0])
        s, o = statistics.median(stat_t), statistics.median(once_t)
        print(f"{a.writers} writers, {shape}: start to a first snapshot (gym-stat --json) "
              f"{s * 1000:.0f} ms (range {min(stat_t) * 1000:.0f}-{max(stat_t) * 1000:.0f}); "
              f"gym-exporter --once {o * 1000:.0f} ms; ratio {s / o:.2f}")
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "60",
                        f"TERM=xterm exec {stat} --registry.dir={d} --interval=1"], check=True)
        pid = int(subprocess.run(["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"],
                                 check=True, capture_output=True, text=True).stdout)
        time.sleep(2)
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(a.seconds)
        c1, t1 = cpu_seconds(pid), time.monotonic()
        print(f"{a.writers} writers, {shape}: full screen at a 1 s refresh "
              f"{100 * (c1 - c0) / (t1 - t0):.2f}% of a core over {t1 - t0:.0f} s")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        holder.kill()
        holder.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default="build")
    ap.add_argument("--writers", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    for shared in (True, False):
        measure(a, shared)


if __name__ == "__main__":
    main()
