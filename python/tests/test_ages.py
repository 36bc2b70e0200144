"""The ages of the oldest waiter and holder (gym_concurrency_oldest_*_seconds)
from Python writers beside a C++ one, and the hand-off of a released slot to
a waiter as an outside scrape sees it."""
import asyncio
import os
import subprocess
import time
import urllib.request

import pytest

from conftest import BUILD, EXPORTER, REGISTRY, parse, scrape, value
from gym_metrics import MeteredSemaphore

HOLDER = os.path.join(BUILD, "tests", "gym_hold_limit")


def start_cpp_holder(limit_name, holds=1):
    p = subprocess.Popen([HOLDER, "agent_server", limit_name, "4", str(holds)],
                         stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "GYM_METRICS_DIR": REGISTRY})
    assert p.stdout.readline().strip() == "held"
    return p


def test_ages_agree_between_a_cpp_and_a_python_writer_sharing_a_limits_labels():
    name = "ages_shared"
    cpp = start_cpp_holder(name)
    try:
        time.sleep(1.5)

        async def hold_and_scrape():
            sem = MeteredSemaphore(4, "agent_server", name)
            async with sem:
                both = await asyncio.to_thread(scrape)
                await asyncio.sleep(0.3)
                cpp.kill()
                cpp.wait()
                python_only = await asyncio.to_thread(scrape)
            return both, python_only, await asyncio.to_thread(scrape)

        both, python_only, none = asyncio.run(hold_and_scrape())
    finally:
        cpp.kill()
        cpp.wait()
    labels = {"nemo_gym_concurrency_limit_name": name}
    # The oldest hold is the C++ writer's, held 1.5 s before Python's.
    assert value(both, "gym_concurrency_active", **labels) == 2
    assert 1.5 <= value(both, "gym_concurrency_oldest_hold_seconds", **labels) < 10
    # Without it, Python's: held from just before the first scrape.
    assert value(python_only, "gym_concurrency_active", **labels) == 1
    age = value(python_only, "gym_concurrency_oldest_hold_seconds", **labels)
    assert 0.3 <= age < 1.4, age
    assert value(none, "gym_concurrency_oldest_hold_seconds", **labels) == 0


CONTEND = """
import asyncio, sys
from gym_metrics import MeteredSemaphore

async def main():
    sem = MeteredSemaphore(2, "agent_server", sys.argv[1])
    done = asyncio.Event()

    async def task():
        while not done.is_set():
            async with sem:
                await asyncio.sleep(0)

    tasks = [asyncio.create_task(task()) for _ in range(100)]
    await asyncio.sleep(0.05)
    print("contending", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    done.set()
    await asyncio.gather(*tasks)
    print(sem.active, sem.queued, flush=True)

asyncio.run(main())
"""


CONTEND_WITH_TIMEOUTS = """
import asyncio, sys
from gym_metrics import MeteredSemaphore

async def main():
    sem = MeteredSemaphore(3, "agent_server", sys.argv[1], admission_timeout_s=0.002)
    done = asyncio.Event()

    async def task():
        while not done.is_set():
            try:
                async with sem:
                    await asyncio.sleep(0.001)
            except TimeoutError:
                pass

    tasks = [asyncio.create_task(task()) for _ in range(40)]
    await asyncio.sleep(0.05)
    print("contending", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    done.set()
    await asyncio.gather(*tasks)
    print(sem.active, sem.queued, flush=True)

asyncio.run(main())
"""


def test_no_free_slot_beside_a_queue_while_admission_timeouts_fire(served_exporter):
    name = "handoff_timeouts"
    # 40 tasks on 3 slots with a 2 ms admission timeout: waits keep timing
    # out while slots are released and handed on.
    p = subprocess.Popen(["/usr/bin/python3", "-c", CONTEND_WITH_TIMEOUTS, name],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "GYM_METRICS_DIR": REGISTRY})
    try:
        assert p.stdout.readline().strip() == "contending"
        scrapes = [parse(urllib.request.urlopen(served_exporter, timeout=5).read().decode())
                   for _ in range(3000)]
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().split() == ["0", "0"], "all slots back, nobody waits"
    finally:
        p.kill()
        p.wait()
    labels = {"nemo_gym_concurrency_limit_name": name}
    busy = 0
    for s in scrapes:
        available = value(s, "gym_concurrency_available", **labels)
        queued = value(s, "gym_concurrency_queue_depth", **labels)
        assert not (available > 0 and queued > 0), (available, queued)
        busy += queued > 0
    timeouts = value(scrapes[-1], "gym_concurrency_admission_timeouts_total", **labels)
    assert busy > 0 and timeouts > 0, "waits queued and timed out while scraped"


def test_a_handed_off_slot_is_never_shown_free_beside_a_queue(served_exporter):
    name = "handoff"
    # 100 tasks contend for 2 slots in another process, as a server's would.
    p = subprocess.Popen(["/usr/bin/python3", "-c", CONTEND, name], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "GYM_METRICS_DIR": REGISTRY})
    try:
        assert p.stdout.readline().strip() == "contending"
        scrapes = [parse(urllib.request.urlopen(served_exporter, timeout=5).read().decode())
                   for _ in range(1000)]
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().split() == ["0", "0"], "all slots back, nobody waits"
    finally:
        p.kill()
        p.wait()
    labels = {"nemo_gym_concurrency_limit_name": name}
    busy = 0
    for s in scrapes:
        active = value(s, "gym_concurrency_active", **labels)
        available = value(s, "gym_concurrency_available", **labels)
        queued = value(s, "gym_concurrency_queue_depth", **labels)
        assert active + available == 2, (active, available)
        assert 0 <= available <= 2
        assert not (available > 0 and queued > 0), (available, queued)
        busy += queued > 0
    assert busy > 900, "the tasks contended while scraped"


def limit_state(samples, name):
    labels = {"nemo_gym_concurrency_limit_name": name}
    return {k: value(samples, f"gym_concurrency_{k}", **labels)
            for k in ("available", "queue_depth", "admission_cancelled_total",
                      "admission_timeouts_total")}


def test_a_cancelled_waiter_is_off_the_queue_before_its_slot_is_freed():
    """A waiter's task is cancelled, and the slot is released before that
    task runs again: the release ends the wait (counted as cancelled) before
    it frees the slot. A scrape taken in between (the loop blocked, so the
    waiter cannot have resumed) shows the free slot and no queue."""
    name = "cancel_then_release"

    async def main():
        sem = MeteredSemaphore(1, "agent_server", name)
        await sem.acquire()
        waiter = asyncio.create_task(sem.acquire())
        await asyncio.sleep(0)  # it waits now
        waiting = scrape()
        waiter.cancel()  # its future is cancelled at once; its task runs later
        sem.release()
        between = scrape()  # blocks the loop: nothing else ran
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return waiting, between, scrape()

    waiting, between, after = asyncio.run(main())
    assert limit_state(waiting, name)["queue_depth"] == 1
    assert limit_state(waiting, name)["available"] == 0
    want = {"available": 1, "queue_depth": 0, "admission_cancelled_total": 1,
            "admission_timeouts_total": None}  # no timeout: no such series
    assert limit_state(between, name) == want
    assert limit_state(after, name) == want


def test_a_wait_ends_when_its_admission_timeout_fires_before_a_release():
    """The admission timeout is due, and a release runs in the same loop
    iteration, before the waiter's task resumes: the wait ended (counted as
    timed out) when its timeout fired, so the release frees the slot instead
    of handing it to a caller already out of time, and no scrape shows a
    free slot beside a queue."""
    name = "timeout_then_release"

    async def main():
        loop = asyncio.get_running_loop()
        sem = MeteredSemaphore(1, "agent_server", name, admission_timeout_s=0.05)
        await sem.acquire()
        waiter = asyncio.create_task(sem.acquire())
        await asyncio.sleep(0)  # it waits now, its timeout due in 50 ms
        seen = {}

        def after_the_timeout():  # due after the waiter's timeout
            seen["timed out"] = scrape()
            sem.release()
            seen["released"] = scrape()

        loop.call_at(loop.time() + 0.06, after_the_timeout)
        time.sleep(0.1)  # both are due when the loop next looks: one iteration runs both
        with pytest.raises(TimeoutError):
            await waiter
        return seen

    seen = asyncio.run(main())
    assert limit_state(seen["timed out"], name) == {
        "available": 0, "queue_depth": 0, "admission_cancelled_total": 0,
        "admission_timeouts_total": 1}
    assert limit_state(seen["released"], name) == {
        "available": 1, "queue_depth": 0, "admission_cancelled_total": 0,
        "admission_timeouts_total": 1}
