#!/usr/bin/env python3
"""resources_operation (its __aenter__/__aexit__ in the extension, in C)
against a bare `async with` on the same asyncio.Semaphore, and against the
same reporting written as a Python class with __aenter__/__aexit__ (as it
was until 2026-12-05) and as an @asynccontextmanager generator (before that),
in one run: rounds alternate, medians of 7. Goal (#43): at most 1.5 times
the bare block.

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


_OUTCOME_CODES = {"ok": 0, "error": 1, "timeout": 2, "cancelled": 3, "crashed": 4}


class PythonOperation:
    """The same reporting as a Python class with __aenter__/__aexit__, as
    gym_metrics had it until its scope moved into the extension."""

    __slots__ = ("_limit", "_kind", "_outcome", "_started", "_running")

    def __init__(self, limit, operation, executor):
        if operation not in gym_metrics.OPERATIONS or executor not in gym_metrics.EXECUTORS:
            raise ValueError(operation)
        self._limit = limit
        self._kind = _abi.operation_kind(operation, executor)
        self._outcome = None

    async def __aenter__(self):
        kind = self._kind
        queued = _abi.operation_queued(kind)
        queued_at = time.monotonic_ns()
        try:
            await self._limit.__aenter__()
        except BaseException:
            _abi.operation_dequeued(kind, queued)
            raise
        self._started = started = time.monotonic_ns()
        self._running = _abi.operation_started(kind, started - queued_at, queued)
        return self

    async def __aexit__(self, exc_type, exc, tb):
        outcome = self._outcome
        if outcome is None:
            if exc_type is None:
                outcome = "ok"
            elif issubclass(exc_type, asyncio.CancelledError):
                outcome = "cancelled"
            else:
                outcome = "error"
        try:
            _abi.operation_finished(self._kind, time.monotonic_ns() - self._started,
                                    _OUTCOME_CODES[outcome], self._running)
        finally:
            await self._limit.__aexit__(None, None, None)
        return False


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
    rounds = {"bare async with": [], "resources_operation": [], "Python class (before)": [],
              "generator (older)": []}
    scopes = {"resources_operation": gym_metrics.resources_operation,
              "Python class (before)": PythonOperation, "generator (older)": generator_operation}
    for _ in range(7):
        rounds["bare async with"].append(asyncio.run(bare(asyncio.Semaphore(4))) * 1e9)
        for name, scope in scopes.items():
            rounds[name].append(asyncio.run(scoped(asyncio.Semaphore(4), scope)) * 1e9)
    base = statistics.median(rounds["bare async with"])
    before = statistics.median(rounds["Python class (before)"])
    for name, times in rounds.items():
        m = statistics.median(times)
        print(f"{name:<22} {m:8.0f} ns (range {min(times):.0f}-{max(times):.0f})"
              f"  vs bare {m / base:5.2f}  vs Python class {m / before:5.2f}")


if __name__ == "__main__":
    main()
