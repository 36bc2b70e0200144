#!/usr/bin/env python3
"""What instrument_runtime() costs the loop it watches, in one run:

- throughput: a callback-heavy workload (tasks that each yield to the loop
  many times, and chains of call_soon callbacks, allocating as they go so
  that the collector runs) on a fresh loop, uninstrumented and instrumented,
  rounds alternating, medians of 11, in CPU time (the scheduler's own count,
  /proc/self/schedstat: other processes on a shared machine move wall time
  more). Goal: the instrumented one within 2%.
- idle: the process's CPU time while its loop sleeps, uninstrumented and
  instrumented (the default probe interval). Goal: below 0.1% of a core.
  CPU time from schedstat, in nanoseconds: the tick-sampled
  time.process_time() cannot see 0.1% of a core in seconds.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_runtime_bench.py [--idle-seconds=S]
"""
import asyncio
import atexit
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time

if "GYM_METRICS_DIR" not in os.environ:  # a registry of our own, removed at exit
    os.environ["GYM_METRICS_DIR"] = tempfile.mkdtemp(prefix="gym-bench-py-", dir="/dev/shm")
    atexit.register(shutil.rmtree, os.environ["GYM_METRICS_DIR"], True)
import gym_metrics  # noqa: E402
from gym_metrics import runtime as _runtime  # noqa: E402

TASKS, YIELDS, CHAINS, LINKS = 200, 500, 50, 2000


async def workload():
    async def task():
        junk = []
        for i in range(YIELDS):
            junk.append({"i": i})  # containers: the young generation fills
            await asyncio.sleep(0)

    loop = asyncio.get_running_loop()
    done = loop.create_future()
    left = [CHAINS]

    def link(n):
        if n:
            loop.call_soon(link, n - 1)
        else:
            left[0] -= 1
            if left[0] == 0:
                done.set_result(None)

    for _ in range(CHAINS):
        loop.call_soon(link, LINKS)
    await asyncio.gather(*(task() for _ in range(TASKS)))
    await done


def cpu_seconds():
    """CPU time of this process's threads so far, from the scheduler."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def gc_hook(on):
    """The process-wide collector hook, on or off (the baseline has none)."""
    if on and _runtime._on_gc not in gc.callbacks and _runtime._process_runtime is not None:
        gc.callbacks.append(_runtime._on_gc)
    if not on and _runtime._on_gc in gc.callbacks:
        gc.callbacks.remove(_runtime._on_gc)


def run_once(instrumented):
    async def main():
        inst = gym_metrics.instrument_runtime(server_name="bench") if instrumented else None
        gc_hook(instrumented)
        start = cpu_seconds()
        await workload()
        elapsed = cpu_seconds() - start
        if inst is not None:
            inst.close()
        return elapsed

    return asyncio.run(main())


def idle_cpu(instrumented, seconds):
    async def main():
        inst = gym_metrics.instrument_runtime(server_name="bench") if instrumented else None
        gc_hook(instrumented)
        await asyncio.sleep(0.5)  # past the first probe
        cpu, wall = cpu_seconds(), time.perf_counter()
        await asyncio.sleep(seconds)
        cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
        if inst is not None:
            inst.close()
        return cpu / wall

    return asyncio.run(main())


def main():
    idle_seconds = 10.0
    for a in sys.argv[1:]:
        if a.startswith("--idle-seconds="):
            idle_seconds = float(a.split("=", 1)[1])
    run_once(True)  # warm up (and open the process's runtime handle)
    run_once(False)
    ratios, base, inst = [], [], []
    for k in range(21):
        if k % 2:
            i, b = run_once(True), run_once(False)
        else:
            b, i = run_once(False), run_once(True)
        base.append(b)
        inst.append(i)
        ratios.append(i / b)
    b, i = statistics.median(base), statistics.median(inst)
    print(f"throughput: uninstrumented {b * 1e3:.1f} ms, instrumented {i * 1e3:.1f} ms CPU "
          f"per workload ({TASKS}x{YIELDS} yields, {CHAINS}x{LINKS} callbacks, medians): "
          f"ratio {statistics.median(ratios):.3f} (median of 21 pairs; goal <= 1.02)")
    idle_base = idle_cpu(False, idle_seconds)
    idle_inst = idle_cpu(True, idle_seconds)
    print(f"idle CPU over {idle_seconds:.0f} s: uninstrumented {idle_base * 100:.3f}% of a core, "
          f"instrumented {idle_inst * 100:.3f}% (goal < 0.1%; probe every "
          f"{gym_metrics.runtime.DEFAULT_INTERVAL_S} s)")


if __name__ == "__main__":
    main()
