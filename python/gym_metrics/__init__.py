"""gym_metrics: NeMo Gym's concurrency and resources-operation metrics for
asyncio servers, written through libgymmetrics into the same shared-memory
registry that gym-exporter serves (and C++ writers use).

    from gym_metrics import MeteredSemaphore, resources_operation, declare_server

    declare_server("math_verifier", "resources_server")
    verifiers = MeteredSemaphore(4, "resources_server", "verifiers",
                                 server_name="math_verifier", admission_timeout_s=30)
    async with resources_operation(verifiers, operation="verify", executor="subprocess") as op:
        if not await run_the_verifier():
            op.outcome = "timeout"

The registry directory is $GYM_METRICS_DIR (default /dev/shm/gym-metrics);
without a usable registry everything still works, unmetered.
"""
import asyncio
import contextlib
import time
from typing import Any, AsyncIterator, Dict, Optional

from . import _gym_metrics as _abi

__all__ = [
    "COMPONENTS", "EXECUTORS", "OPERATIONS", "OUTCOMES", "MeteredSemaphore",
    "ResourcesOperation", "declare_server", "resources_operation",
]

COMPONENTS = frozenset({"rollout_driver", "agent_server", "model_server", "resources_server",
                        "other"})
OPERATIONS = frozenset({"verify", "tool", "judge", "other"})
EXECUTORS = frozenset({"inline", "thread", "process", "subprocess", "other"})
OUTCOMES = frozenset({"ok", "error", "timeout", "cancelled", "crashed"})


class MeteredSemaphore(asyncio.BoundedSemaphore):
    """An asyncio.BoundedSemaphore that counts its slots in use and its waiters
    for export. `async with`, acquire, release and locked behave as on the base
    class. acquire raises TimeoutError when no slot is free within
    admission_timeout_s (counted as an admission timeout); a wait cancelled
    before a slot was free is counted as a cancellation, so pass the timeout
    here rather than wrapping acquire in asyncio.wait_for, which is counted as
    a cancellation."""

    def __init__(self, limit: int, component: str, limit_name: str,
                 server_name: Optional[str] = None,
                 admission_timeout_s: Optional[float] = None) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"concurrency limit must be an integer of at least 1, got {limit!r}")
        if component not in COMPONENTS:
            raise ValueError(f"unknown concurrency component {component!r}")
        if admission_timeout_s is not None and not admission_timeout_s >= 0:
            raise ValueError(f"admission timeout must be >= 0, got {admission_timeout_s!r}")
        # The library checks the limit and server names (ValueError).
        self._handle = _abi.limit_open(component, limit_name, server_name, limit,
                                       -1.0 if admission_timeout_s is None
                                       else float(admission_timeout_s))
        super().__init__(limit)
        self._limit = limit
        self._queued = 0
        self._admission_timeout_s = admission_timeout_s
        self._attributes = {"nemo_gym_concurrency_component": component,
                            "nemo_gym_concurrency_limit_name": limit_name}
        if server_name is not None:
            self._attributes["nemo_gym_server_name"] = server_name

    @property
    def limit(self) -> int:
        """The configured number of slots."""
        return self._limit

    @property
    def active(self) -> int:
        """Slots held right now."""
        return self._limit - self._value

    @property
    def queued(self) -> int:
        """Callers waiting for a slot right now."""
        return self._queued

    @property
    def admission_timeout_s(self) -> Optional[float]:
        """How long one caller may wait for a slot, or None to wait indefinitely."""
        return self._admission_timeout_s

    @property
    def attributes(self) -> Dict[str, str]:
        """The metric labels this limit reports under."""
        return dict(self._attributes)

    async def acquire(self) -> bool:
        if not self.locked():
            # A slot is free: take it as asyncio.Semaphore.acquire does when
            # it need not wait (one coroutine frame less than awaiting it).
            self._value -= 1
            _abi.limit_acquired(self._handle)
            return True
        self._queued += 1
        _abi.limit_wait_started(self._handle)
        try:
            if self._admission_timeout_s is None:
                await super().acquire()
            else:
                await asyncio.wait_for(super().acquire(), self._admission_timeout_s)
        except asyncio.TimeoutError:
            self._queued -= 1
            _abi.limit_wait_timed_out(self._handle)
            raise TimeoutError(
                f"no slot of {self._attributes['nemo_gym_concurrency_limit_name']} became free "
                f"within {self._admission_timeout_s} s") from None
        except BaseException:  # cancelled (also by an outer wait_for)
            self._queued -= 1
            _abi.limit_wait_cancelled(self._handle)
            raise
        self._queued -= 1
        _abi.limit_wait_admitted(self._handle)
        return True

    def release(self) -> None:
        # BoundedSemaphore raises ValueError, changing nothing, when no slot
        # is held.
        super().release()
        _abi.limit_released(self._handle)


class ResourcesOperation:
    """One limited operation. Set `outcome` inside the block when the work
    ended other than by returning normally."""

    __slots__ = ("_outcome",)

    def __init__(self) -> None:
        self._outcome: Optional[str] = None

    @property
    def outcome(self) -> Optional[str]:
        return self._outcome

    @outcome.setter
    def outcome(self, value: Optional[str]) -> None:
        if value is not None and value not in OUTCOMES:
            raise ValueError(f"unknown outcome {value!r}; one of {sorted(OUTCOMES)}")
        self._outcome = value


@contextlib.asynccontextmanager
async def resources_operation(limit: Any, operation: str,
                              executor: str) -> AsyncIterator[ResourcesOperation]:
    """Enter `limit` (any async context manager, such as an asyncio.Semaphore)
    and report the operation: queued while waiting, the queue duration on
    entry, active inside, the duration with its outcome on exit. An exception
    sets the outcome to error, a cancellation to cancelled, unless the block
    already set one."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; one of {sorted(OPERATIONS)}")
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; one of {sorted(EXECUTORS)}")
    _abi.operation_queued(operation, executor)
    queued_at = time.monotonic()
    try:
        await limit.__aenter__()
    except BaseException:
        _abi.operation_dequeued(operation, executor)
        raise
    started = time.monotonic()
    _abi.operation_started(operation, executor, started - queued_at)
    op = ResourcesOperation()
    outcome = "ok"
    try:
        yield op
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    except BaseException:
        outcome = "error"
        raise
    finally:
        _abi.operation_finished(operation, executor, time.monotonic() - started,
                                op.outcome or outcome)
        await limit.__aexit__(None, None, None)


def declare_server(name: str, server_type: str) -> None:
    """Declare which Gym server this process is: its resources-operation
    series then carry nemo_gym_server_name (declare before the first
    operation), and gym-exporter samples its process tree's memory."""
    _abi.declare_server(name, server_type)
