"""A Python server's runtime, as gym-exporter serves it: how late its event
loop runs (gym_python_event_loop_lag_seconds), how long it has been blocked
right now (gym_python_event_loop_blocked_seconds), its tasks, its garbage
collections and its threads.

    async def main():
        declare_server("math_verifier", "resources_server", runtime=True)
        # or, for a loop of one's own: instrument_runtime(server_name=...)

The loop is watched by a probe callback of its own, every `interval_s`: it
records how late it ran, sets the time the next one is due (plus
`grace_s`) as the start of a heartbeat in the registry, and (every second)
counts the loop's tasks and the process's threads. The exporter serves how long that heartbeat is overdue as
of each scrape, so a loop blocked for 30 s shows 30 s while it is blocked,
with no thread watching it. Garbage collections are timed by a gc.callbacks
hook, once per process. Nothing here raises into the loop: a call into the
library that fails is dropped, and a full registry makes all of it a counted
no-op, as for every other series.
"""
import asyncio
import gc
import threading
import time
import weakref
from typing import Any, Dict, List, Optional

from . import _gym_metrics as _abi

__all__ = ["DEFAULT_GRACE_S", "DEFAULT_INTERVAL_S", "RuntimeInstrumentation",
           "instrument_runtime"]

# The probe's defaults. Each probe wakes an idle loop, which costs it about
# 25 us of CPU: 0.35 s is 0.08% of a core (bench/python_runtime_bench.py).
# A blocked loop reads its time blocked so far less between the grace and
# the interval plus the grace.
DEFAULT_INTERVAL_S = 0.35
DEFAULT_GRACE_S = 0.05

# How often the loop's tasks and the process's threads are counted, in
# probes (counting tasks walks all of them).
_COUNT_EVERY_S = 1.0

# The process's runtime handle (GC pauses, threads), opened by the first
# instrument_runtime() with that call's server name, and its gc hook.
_process_lock = threading.Lock()
_process_runtime: Optional[Any] = None
_gc_started = [0]


def _on_gc(phase: str, info: Dict[str, Any]) -> None:
    # Runs inside the interpreter's collector: nothing may escape.
    try:
        if phase == "start":
            _gc_started[0] = time.perf_counter_ns()
        elif _gc_started[0] and _process_runtime is not None:
            _abi.runtime_gc(_process_runtime, int(info["generation"]),
                            time.perf_counter_ns() - _gc_started[0])
            _gc_started[0] = 0
    except Exception:
        pass


def _runtime_handle(server_name: Optional[str]) -> Any:
    global _process_runtime
    with _process_lock:
        if _process_runtime is None:
            _process_runtime = _abi.runtime_open(server_name)
            gc.callbacks.append(_on_gc)
        return _process_runtime


class RuntimeInstrumentation:
    """One instrumented event loop; close() stops its probe (its heartbeat
    and tasks then stop reporting; the lag histogram stays, and so do the
    process's collections and threads, which belong to the process)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, server_name: Optional[str],
                 interval_s: float, grace_s: float) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        if not grace_s >= 0:
            raise ValueError(f"grace_s must be >= 0, got {grace_s!r}")
        # Weakly: the registry of instrumented loops holds this object, and
        # must not keep a loop alive.
        self._loop = weakref.ref(loop)
        self._interval_s = float(interval_s)
        # When the next beat is overdue: its interval and the grace later.
        self._due_in_ns = int((self._interval_s + grace_s) * 1e9)
        self._count_every = max(1, round(_COUNT_EVERY_S / self._interval_s))
        self._runtime = _runtime_handle(server_name)
        self._handle: Optional[Any] = _abi.loop_open(server_name)
        self._ticks = 0
        self._due = loop.time()
        self._timer: Optional[asyncio.Handle] = loop.call_soon(self._probe)

    @property
    def interval_s(self) -> float:
        """How often the probe runs."""
        return self._interval_s

    def _probe(self) -> None:
        loop = self._loop()
        if loop is None:
            return
        now = loop.time()
        lag = now - self._due
        self._due = now + self._interval_s
        # Re-armed first: whatever follows, the probe goes on.
        self._timer = loop.call_at(self._due, self._probe)
        try:
            _abi.loop_beat(self._handle, int(lag * 1e9), self._due_in_ns)
            if self._ticks % self._count_every == 0:
                _abi.loop_tasks(self._handle, len(asyncio.all_tasks(loop)), self._runtime,
                                threading.active_count())
        except Exception:
            pass
        self._ticks += 1

    def close(self) -> None:
        """Stops the probe; the loop's heartbeat and tasks stop reporting."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._handle = None  # the capsule closes the loop's series
        loop = self._loop()
        if loop is not None and _instrumented.get(loop) is self:
            del _instrumented[loop]


_instrumented: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RuntimeInstrumentation]" = (
    weakref.WeakKeyDictionary())


def instrument_runtime(loop: Optional[asyncio.AbstractEventLoop] = None, *,
                       server_name: Optional[str] = None,
                       interval_s: float = DEFAULT_INTERVAL_S,
                       grace_s: float = DEFAULT_GRACE_S) -> RuntimeInstrumentation:
    """Instruments `loop` (default: the running loop; RuntimeError without
    one) and, once per process, the garbage collector. Series carry
    `server_name`, else the server this process declared. The probe runs
    every `interval_s`; the loop counts as blocked once a probe is `grace_s`
    overdue. Instrumenting a loop again returns its instrumentation."""
    if loop is None:
        loop = asyncio.get_running_loop()
    got = _instrumented.get(loop)
    if got is None:
        got = _instrumented[loop] = RuntimeInstrumentation(loop, server_name, interval_s, grace_s)
    return got


def _loops() -> List[RuntimeInstrumentation]:
    """The instrumented loops (for tests)."""
    return list(_instrumented.values())
