#!/usr/bin/env python3
"""Metered acquire + release versus plain asyncio.BoundedSemaphore, in one run
(uncontended, then 2 tasks contending for 1 slot). Goal: at most 1.5 times.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_semaphore_bench.py
"""
import asyncio
import atexit
import os
import shutil
import statistics
import tempfile
import time

if "GYM_METRICS_DIR" not in os.environ:  # a registry of our own, removed at exit
    os.environ["GYM_METRICS_DIR"] = tempfile.mkdtemp(prefix="gym-bench-py-", dir="/dev/shm")
    atexit.register(shutil.rmtree, os.environ["GYM_METRICS_DIR"], True)
from gym_metrics import MeteredSemaphore  # noqa: E402

N = 200_000


async def uncontended(sem):
    start = time.perf_counter()
    for _ in range(N):
        await sem.acquire()
        sem.release()
    return (time.perf_counter() - start) / N


async def contended(sem):
    async def worker():
        for _ in range(N // 2):
            async with sem:
                await asyncio.sleep(0)
    start = time.perf_counter()
    await asyncio.gather(worker(), worker())
    return (time.perf_counter() - start) / N


def main():
    for name, case in (("uncontended", uncontended), ("2 tasks, 1 slot", contended)):
        # Rounds alternate between the two, so that load from elsewhere on
        # the machine falls on both alike; medians of 7.
        plain, metered = [], []
        for _ in range(7):
            plain.append(asyncio.run(case(asyncio.BoundedSemaphore(1))) * 1e9)
            metered.append(asyncio.run(case(MeteredSemaphore(1, "agent_server", "bench"))) * 1e9)
        p, m = statistics.median(plain), statistics.median(metered)
        print(f"{name:<16} plain {p:8.0f} ns  metered {m:8.0f} ns  ratio {m / p:.2f}")


if __name__ == "__main__":
    main()
