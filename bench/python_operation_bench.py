#!/usr/bin/env python3
"""resources_operation (a class with __aenter__/__aexit__ over the library's
by-kind calls) against a bare `async with` on the same asyncio.Semaphore,
and against the same reporting written as an @asynccontextmanager generator
(as it was before), in one run: rounds alternate, medians of 7. Goal: at
most 3 times the bare block.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_operation_bench.py
"""
import asyncio
import atexit
import contextlib
import os
import shutil
import statistics
import tempfile
import time

if "GYM_METRICS_DIR" not in os.environ:  # a registry of our own, removed at exit
    os.environ["GYM_METRICS_DIR"] = tempfile.mkdtemp(prefix="gym-bench-py-", dir="/dev/shm")
    atexit.register(shutil.rmtree, os.environ["GYM_METRICS_DIR"], True)
import gym_metrics  # noqa: E402
from gym_metrics import _gym_metrics as _abi  # noqa: E402

N = 100_000


@contextlib.asynccontextmanager
async def generator_operation(limit, operation, executor):
    """The same reporting as an @asynccontextmanager generator, as gym_metrics
    had it (over the library's by-kind calls): the baseline."""
    if operation not in gym_metrics.OPERATIONS or executor not in gym_metrics.EXECUTORS:
        raise ValueError(operation)
    kind = _abi.operation_kind(operation, executor)
    queued = _abi.operation_queued(kind)
    queued_at = time.monotonic_ns()
    try:
        await limit.__aenter__()
    except BaseException:
        _abi.operation_dequeued(kind, queued)
        raise
    started = time.monotonic_ns()
    running = _abi.operation_started(kind, started - queued_at, queued)
    outcome = 0
    try:
        yield None
    except BaseException:
        outcome = 1
        raise
    finally:
        _abi.operation_finished(kind, time.monotonic_ns() - started, outcome, running)
        await limit.__aexit__(None, None, None)


async def bare(sem):
    start = time.perf_counter()
    for _ in range(N):
        async with sem:
            pass
    return (time.perf_counter() - start) / N


async def scoped(sem, scope):
    start = time.perf_counter()
    for _ in range(N):
        async with scope(sem, "verify", "inline"):
            pass
    return (time.perf_counter() - start) / N


def main():
    rounds = {"bare async with": [], "resources_operation": [], "generator (before)": []}
    for _ in range(7):
        rounds["bare async with"].append(asyncio.run(bare(asyncio.Semaphore(4))) * 1e9)
        rounds["resources_operation"].append(
            asyncio.run(scoped(asyncio.Semaphore(4), gym_metrics.resources_operation)) * 1e9)
        rounds["generator (before)"].append(
            asyncio.run(scoped(asyncio.Semaphore(4), generator_operation)) * 1e9)
    base = statistics.median(rounds["bare async with"])
    gen = statistics.median(rounds["generator (before)"])
    for name, times in rounds.items():
        m = statistics.median(times)
        print(f"{name:<22} {m:8.0f} ns (range {min(times):.0f}-{max(times):.0f})"
              f"  vs bare {m / base:5.2f}  vs generator {m / gen:5.2f}")


if __name__ == "__main__":
    main()
