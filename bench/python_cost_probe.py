#!/usr/bin/env python3
"""What bench/cost_guard.py runs under callgrind for the Python rows: N
`async with` blocks on one asyncio.Semaphore, bare or through
gym_metrics.resources_operation, in one event loop.

    PYTHONPATH=build/python python3 bench/python_cost_probe.py bare|operation N
"""
import asyncio
import os
import shutil
import sys
import tempfile

if "GYM_METRICS_DIR" not in os.environ:  # a registry of our own, removed at exit
    os.environ["GYM_METRICS_DIR"] = tempfile.mkdtemp(prefix="gym-cost-py-", dir="/dev/shm")
    import atexit
    atexit.register(shutil.rmtree, os.environ["GYM_METRICS_DIR"], True)
import gym_metrics  # noqa: E402


async def bare(sem, n):
    for _ in range(n):
        async with sem:
            pass


async def operation(sem, n):
    for _ in range(n):
        async with gym_metrics.resources_operation(sem, "verify", "inline"):
            pass


def main():
    kind, n = sys.argv[1], int(sys.argv[2])
    body = {"bare": bare, "operation": operation}[kind]
    asyncio.run(body(asyncio.Semaphore(4), n))


if __name__ == "__main__":
    main()
