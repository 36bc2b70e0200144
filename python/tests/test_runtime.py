"""A Python server's runtime (gym_metrics.instrument_runtime), from real
asyncio processes, scraped from another process through a running
gym-exporter: a blocked loop while it is blocked and after, the lag
histogram, tasks, garbage collections by generation, and what stays when the
process exits."""
import asyncio
import os
import select
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import REGISTRY, parse, value
import gym_metrics

# A server that runs what the test writes on its stdin, one line at a time,
# in its loop, and answers "done <line>".
SERVER = """
import asyncio, gc, sys, time
from gym_metrics import declare_server

async def main():
    gc.disable()  # only the test's own collections
    declare_server(sys.argv[1], "resources_server", runtime=True)
    loop = asyncio.get_running_loop()
    lines = asyncio.Queue()
    loop.add_reader(sys.stdin.fileno(), lambda: lines.put_nowait(sys.stdin.readline().strip()))
    release = asyncio.Event()
    tasks = []
    print("ready", flush=True)
    while True:
        cmd = await lines.get()
        if cmd == "block":
            print("blocking", flush=True)
            time.sleep(2)  # a synchronous call: the loop is blocked
        elif cmd == "tasks":
            tasks = [asyncio.create_task(release.wait()) for _ in range(50)]
        elif cmd == "finish":
            release.set()
            await asyncio.gather(*tasks)
        elif cmd.startswith("gc"):
            gc.collect(int(cmd[2:]))
        elif cmd == "exit":
            return
        print("done", cmd, flush=True)

asyncio.run(main())
"""


class Server:
    def __init__(self, name):
        self.name = name
        self.p = subprocess.Popen([sys.executable, "-c", SERVER, name], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "GYM_METRICS_DIR": REGISTRY})
        assert self.p.stdout.readline().strip() == "ready"

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def done(self, cmd):
        assert self.p.stdout.readline().strip() == "done " + cmd

    def run(self, cmd):
        self.send(cmd)
        self.done(cmd)

    def close(self):
        self.p.kill()
        self.p.wait()


@pytest.fixture
def server(request):
    s = Server(request.node.name[5:35])
    yield s
    s.close()


def get(url):
    return parse(urllib.request.urlopen(url, timeout=5).read().decode())


def lag_buckets(samples, server):
    return {float(dict(ls)["le"]): v for (n, ls), v in samples.items()
            if n == "gym_python_event_loop_lag_seconds_bucket"
            and ("nemo_gym_server_name", server) in ls}


def test_a_blocked_loop_shows_blocked_now_during_the_block_and_zero_after(server, served_exporter):
    time.sleep(0.8)
    name = {"nemo_gym_server_name": server.name}
    before = get(served_exporter)
    assert value(before, "gym_python_event_loop_blocked_seconds", **name) == 0
    server.send("block")
    assert server.p.stdout.readline().strip() == "blocking"
    start = time.monotonic()
    # Scraped from here every 20 ms until the block ends: the gauge is a
    # lower bound of the block so far (less between the grace, 0.05 s, and
    # the probe interval plus the grace, 0.4 s), so the scrapes near its end
    # read at least 1.5 s.
    readings = []
    while True:
        ready, _, _ = select.select([server.p.stdout], [], [], 0.02)
        if ready:
            break
        readings.append((time.monotonic() - start,
                         value(get(served_exporter), "gym_python_event_loop_blocked_seconds",
                               **name)))
    assert server.p.stdout.readline().strip() == "done block"
    time.sleep(0.5)
    after = get(served_exporter)
    # Growing with the block, never above it.
    assert all(r <= t + 0.05 for t, r in readings), readings
    assert max(r for _, r in readings) >= 1.5, readings
    assert value(after, "gym_python_event_loop_blocked_seconds", **name) == 0
    # The lag histogram counts it: one probe ran about 2 s late, between
    # the 1 s and 5 s bounds.
    b0, b1 = lag_buckets(before, server.name), lag_buckets(after, server.name)
    assert b1[5] - b1[1] == b0[5] - b0[1] + 1, (b0, b1)
    assert b1[float("inf")] > b0[float("inf")]
    lag_sum = value(after, "gym_python_event_loop_lag_seconds_sum", **name)
    assert lag_sum - value(before, "gym_python_event_loop_lag_seconds_sum", **name) >= 1.5


def test_the_task_count_follows_tasks_created_and_finished(server, served_exporter):
    name = {"nemo_gym_server_name": server.name}
    time.sleep(1.5)  # tasks are counted about every second
    base = value(get(served_exporter), "gym_python_event_loop_tasks", **name)
    assert base is not None and base >= 1  # the main task, at least
    server.run("tasks")
    time.sleep(1.5)
    assert value(get(served_exporter), "gym_python_event_loop_tasks", **name) == base + 50
    server.run("finish")
    time.sleep(1.5)
    assert value(get(served_exporter), "gym_python_event_loop_tasks", **name) == base
    assert value(get(served_exporter), "gym_python_threads", **name) >= 1


def test_forced_collections_are_counted_by_generation_and_stay_after_exit(server,
                                                                          served_exporter):
    name = {"nemo_gym_server_name": server.name}
    for _ in range(3):
        server.run("gc2")
    for _ in range(5):
        server.run("gc0")
    live = get(served_exporter)
    server.send("exit")
    assert server.p.wait(timeout=30) == 0
    time.sleep(0.2)
    gone = get(served_exporter)
    for samples in (live, gone):
        assert value(samples, "gym_python_gc_collections_total",
                     nemo_gym_python_gc_generation="2", **name) == 3
        assert value(samples, "gym_python_gc_collections_total",
                     nemo_gym_python_gc_generation="0", **name) == 5
        assert value(samples, "gym_python_gc_pause_seconds_count",
                     nemo_gym_python_gc_generation="2", **name) == 3
        # A generation never collected has no series.
        assert value(samples, "gym_python_gc_collections_total",
                     nemo_gym_python_gc_generation="1", **name) is None
    assert value(live, "gym_python_event_loop_blocked_seconds", **name) == 0
    # The exited process's counters and histograms are folded; its gauges
    # (blocked now, tasks, threads) are gone.
    assert value(gone, "gym_python_event_loop_lag_seconds_count", **name) >= \
        value(live, "gym_python_event_loop_lag_seconds_count", **name)
    for gauge in ("gym_python_event_loop_blocked_seconds", "gym_python_event_loop_tasks",
                  "gym_python_threads"):
        assert value(gone, gauge, **name) is None, gauge


def test_closing_the_instrumentation_stops_the_probe_and_its_gauges(served_exporter):
    async def main():
        inst = gym_metrics.instrument_runtime(server_name="rt_closed", interval_s=0.02)
        assert gym_metrics.instrument_runtime() is inst  # once per loop
        await asyncio.sleep(0.3)
        live = await asyncio.to_thread(get, served_exporter)
        inst.close()
        inst.close()  # twice is fine
        await asyncio.sleep(0.1)
        return live, await asyncio.to_thread(get, served_exporter)

    live, closed = asyncio.run(main())
    name = {"nemo_gym_server_name": "rt_closed"}
    assert value(live, "gym_python_event_loop_lag_seconds_count", **name) >= 5
    assert value(live, "gym_python_event_loop_tasks", **name) >= 1
    assert value(closed, "gym_python_event_loop_blocked_seconds", **name) is None
    assert value(closed, "gym_python_event_loop_tasks", **name) is None
    assert value(closed, "gym_python_event_loop_lag_seconds_count", **name) >= 5


def test_runtime_needs_a_running_loop_and_sane_intervals():
    with pytest.raises(RuntimeError):
        gym_metrics.instrument_runtime()
    with pytest.raises(RuntimeError):
        gym_metrics.declare_server("rt_no_loop", "resources_server", runtime=True)

    async def bad():
        with pytest.raises(ValueError):
            gym_metrics.instrument_runtime(server_name="rt_bad", interval_s=0)
        with pytest.raises(ValueError):
            gym_metrics.instrument_runtime(server_name="rt_bad", grace_s=-1)
        with pytest.raises(ValueError):
            gym_metrics.instrument_runtime(server_name="")

    asyncio.run(bad())


UNMETERED = """
import asyncio, gc, sys, time
import gym_metrics

async def main():
    inst = gym_metrics.instrument_runtime(server_name="rt_unmetered", interval_s=0.01)
    await asyncio.sleep(0.2)
    time.sleep(0.2)  # blocked: nothing to report it to, nothing raised
    gc.collect()
    await asyncio.sleep(0.1)
    inst.close()
    print("ok", flush=True)

asyncio.run(main())
"""


def test_a_full_registry_makes_the_instrumentation_a_no_op(tmp_path):
    # A 64 KiB tmpfs, filled: no segment can be made; the loop runs on.
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True)
    try:
        (mnt / "registry").mkdir()
        with open(mnt / "filler", "wb") as f:
            try:
                f.write(b"\0" * (1 << 20))
            except OSError:
                pass
        out = subprocess.run([sys.executable, "-c", UNMETERED], capture_output=True, text=True,
                             env={**os.environ, "GYM_METRICS_DIR": str(mnt / "registry")},
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "ok"
        assert out.stderr == ""
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
