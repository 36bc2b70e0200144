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
import collections
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Literal, Optional, Tuple

from . import _gym_metrics as _abi
from .runtime import RuntimeInstrumentation, instrument_runtime

__version__: str = _abi.__version__

__all__ = [
    "COMPONENTS", "EXECUTORS", "OPERATIONS", "OUTCOMES", "MeteredSemaphore",
    "ResourcesOperation", "RuntimeInstrumentation", "declare_server", "instrument_runtime",
    "resources_operation",
]

COMPONENTS = frozenset({"rollout_driver", "agent_server", "model_server", "resources_server",
                        "other"})
OPERATIONS = frozenset({"verify", "tool", "judge", "other"})
EXECUTORS = frozenset({"inline", "thread", "process", "subprocess", "other"})
OUTCOMES = frozenset({"ok", "error", "timeout", "cancelled", "crashed"})


# What a waiter's future holds when its admission timeout fired.
_TIMED_OUT = object()

# OpenTelemetry's trace API when it is importable: the current span's
# context is then an observation's exemplar unless ids are given. Nothing
# depends on it otherwise.
try:
    from opentelemetry import trace as _otel_trace  # type: ignore[import]
except ImportError:  # not installed: no automatic trace context
    _otel_trace = None

Trace = Optional[Tuple[bytes, bytes]]


def _id_bytes(value: Any, size: int, what: str) -> bytes:
    """An id as OpenTelemetry holds it (an int) or writes it (hex digits)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 < value < 1 << (8 * size):
            raise ValueError(f"{what} must be a positive {8 * size}-bit integer")
        return value.to_bytes(size, "big")
    if isinstance(value, str) and len(value) == 2 * size:
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raw = b""
        if len(raw) == size and any(raw):
            return raw
    raise ValueError(f"{what} must be an int or {2 * size} hex digits (not all zero), "
                     f"not {value!r}")


def _trace(trace_id: Any, span_id: Any) -> Trace:
    """The trace context of an observation: the ids given (both or neither),
    else the current OpenTelemetry span's when there is a valid one."""
    if trace_id is not None or span_id is not None:
        if trace_id is None or span_id is None:
            raise ValueError("give both trace_id and span_id, or neither")
        return _id_bytes(trace_id, 16, "trace_id"), _id_bytes(span_id, 8, "span_id")
    if _otel_trace is None:
        return None
    ctx = _otel_trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return ctx.trace_id.to_bytes(16, "big"), ctx.span_id.to_bytes(8, "big")


class MeteredSemaphore(asyncio.BoundedSemaphore):
    """An asyncio.BoundedSemaphore that counts its slots in use and its waiters
    for export. `async with`, acquire, release and locked behave as on the base
    class; the algorithm is this class's own (its free slots, its line of
    waiters): none of the base's state is used, the base is there so that it
    is one, as the seeds document (`isinstance(s, asyncio.Semaphore)`). acquire raises TimeoutError when no slot is free within
    admission_timeout_s (counted as an admission timeout); a wait cancelled
    before a slot was free is counted as a cancellation, so pass the timeout
    here rather than wrapping acquire in asyncio.wait_for, which is counted as
    a cancellation.

    Waiters are served first come, first served, and a release with waiters
    hands its slot straight to the first one, whose admission is counted at
    that instant: the exported free slots, slots in use and queue depth agree
    with the semaphore at every instant (a free slot is never shown beside a
    queue). A waiter cancelled after it was handed a slot, before its task
    resumed, was admitted: its hold ends at once and the slot goes on to the
    next waiter. Every wait's trace (admitted, timed out or cancelled) is its
    wait-duration bucket's exemplar. The ages of the oldest waiter and holder
    follow each task: a release ends the releasing task's own hold, or the
    oldest hold when the task holds none."""

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
        super().__init__(limit)  # the base's state, unused
        self._limit = limit
        self._free = limit
        self._queued = 0
        # Waiters in arrival order: [future, wait ticket]. A future's result
        # is the hold ticket handed to it.
        self._line: Deque[List[Any]] = collections.deque()
        # Hold tickets by the task that holds them.
        self._holds: Dict[Any, List[int]] = {}
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
        return self._limit - self._free

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

    def locked(self) -> bool:
        return self._free == 0

    def __repr__(self) -> str:
        return (f"<MeteredSemaphore {self._attributes['nemo_gym_concurrency_limit_name']} "
                f"limit={self._limit} active={self.active} queued={self._queued}>")

    def _keep_hold(self, hold: int) -> None:
        task = asyncio.current_task()
        held = self._holds.get(task)
        if held is None:
            self._holds[task] = [hold]
        else:
            held.append(hold)

    def _take_hold(self) -> int:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # released outside the event loop
            return 0
        held = self._holds.get(task)
        if not held:
            return 0  # ends the oldest hold
        hold = held.pop()
        if not held:
            del self._holds[task]
        return hold

    async def acquire(self, *, trace_id: Any = None, span_id: Any = None) -> Literal[True]:
        """Waits for a slot. A wait is its wait-duration bucket's exemplar
        with trace_id and span_id (ints as OpenTelemetry's SpanContext holds
        them, or 32 and 16 hex digits), or with the current OpenTelemetry
        span's when opentelemetry is importable and none are given (ids
        given are checked on every call: ValueError when malformed)."""
        given = trace_id is not None or span_id is not None
        trace = _trace(trace_id, span_id) if given else None
        if self._free > 0:
            self._free -= 1
            self._keep_hold(_abi.limit_acquired(self._handle))
            return True
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        # [future, wait, timed out, trace]: the wait is None once its end is
        # counted, which happens before a slot can be freed beside it (never
        # a free slot beside a queue). A slot handed to the future is counted
        # as this wait's admission at the hand-off itself, so the library's
        # queue and holds are the semaphore's at every instant.
        if not given:
            trace = _trace(None, None)
        entry: List[Any] = [fut, _abi.limit_wait_started(self._handle), False, trace]
        self._line.append(entry)
        self._queued += 1
        timer = None
        if self._admission_timeout_s is not None:
            timer = loop.call_later(self._admission_timeout_s, self._time_out, entry)
        try:
            handed = await fut
        except BaseException:
            if fut.done() and not fut.cancelled() and not entry[2]:
                # Handed a slot (an admission, counted), cancelled before it
                # resumed: the caller lets go of the slot at once, to the next.
                self._hand_on(fut.result())
            elif entry[1] is not None:  # cancelled (also by an outer wait_for)
                self._end_wait(entry, _abi.limit_wait_cancelled)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if handed is _TIMED_OUT:  # its wait was counted as timed out already
            raise TimeoutError(
                f"no slot of {self._attributes['nemo_gym_concurrency_limit_name']} became "
                f"free within {self._admission_timeout_s} s")
        self._keep_hold(handed)  # admitted at the hand-off: the hold is this task's
        return True

    def _end_wait(self, entry: List[Any], how: Any) -> None:
        """Counts the end of a wait that got no slot (timed out, cancelled),
        with the waiter's trace as its bucket's exemplar."""
        try:
            self._line.remove(entry)
        except ValueError:
            pass  # _hand_on took it off the line already
        self._queued -= 1
        if entry[3] is None:
            how(self._handle, entry[1])
        else:
            how(self._handle, entry[1], *entry[3])
        entry[1] = None

    def _time_out(self, entry: List[Any]) -> None:
        """The admission timeout of a waiter: its wait ends now, counted."""
        fut = entry[0]
        if fut.done():
            return
        self._end_wait(entry, _abi.limit_wait_timed_out)
        entry[2] = True
        fut.set_result(_TIMED_OUT)

    def _hand_on(self, hold: int) -> None:
        """Gives the slot of `hold` to the first live waiter, its admission
        counted now (the future holds the new hold's ticket), or frees it."""
        while self._line:
            entry = self._line.popleft()
            fut = entry[0]
            if fut.done():  # cancelled, its task not resumed yet: it waits no more
                self._end_wait(entry, _abi.limit_wait_cancelled)
                continue
            self._queued -= 1
            if entry[3] is None:
                handed = _abi.limit_handed_off(self._handle, hold, entry[1])
            else:
                handed = _abi.limit_handed_off(self._handle, hold, entry[1], *entry[3])
            entry[1] = None
            fut.set_result(handed)
            return
        self._free += 1
        _abi.limit_released(self._handle, hold)

    def release(self) -> None:
        if self._free >= self._limit:
            raise ValueError("BoundedSemaphore released too many times")
        self._hand_on(self._take_hold())


# Kinds by (operation, executor), made on first use.
_KINDS: Dict[Any, int] = {}


def _kind_of(operation: str, executor: str) -> int:
    """The kind of (operation, executor), checked (ValueError for a name not
    in OPERATIONS or EXECUTORS): what the extension asks for names it has not
    seen yet."""
    kind = _KINDS.get((operation, executor))
    if kind is None:
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; one of {sorted(OPERATIONS)}")
        if executor not in EXECUTORS:
            raise ValueError(f"unknown executor {executor!r}; one of {sorted(EXECUTORS)}")
        kind = _KINDS[(operation, executor)] = _abi.operation_kind(operation, executor)
    return kind


class ResourcesOperation(_abi.Operation):
    """One limited operation, as `async with resources_operation(...) as op`
    gives it. Set `outcome` inside the block when the work ended other than by
    returning normally (ValueError for one not in OUTCOMES).

    Making it (resources_operation, or ResourcesOperation(limit, operation,
    executor, trace_id=None, span_id=None)) and its __aenter__ and __aexit__
    are the extension's (_abi, in C): `async with resources_operation(...)`
    runs no Python frame of this package once the names are known. Entering
    reports the operation queued, awaits the limit's __aenter__, then reports
    it started (or, when the wait raises or is cancelled, no longer queued);
    leaving reports its duration and outcome, then awaits the limit's
    __aexit__."""

    __slots__ = ()


# A scope made in C finds kinds, trace contexts and _otel_trace here.
_abi.configure_operations(_kind_of, _trace, globals(), ResourcesOperation)

if TYPE_CHECKING:
    def resources_operation(limit: Any, operation: str, executor: str, *,
                            trace_id: Any = None, span_id: Any = None) -> ResourcesOperation:
        """What the extension's resources_operation does, as types see it."""
        return ResourcesOperation(limit, operation, executor, trace_id, span_id)
else:
    # Enter `limit` and report the operation (queued, started, its duration
    # and outcome): the extension's function; help() shows its docstring.
    resources_operation = _abi.resources_operation


def declare_server(name: str, server_type: str, *, runtime: bool = False) -> None:
    """Declare which Gym server this process is: its resources-operation
    series then carry nemo_gym_server_name, and gym-exporter samples its
    process tree's memory. Declare before the first operation: afterwards
    another identity raises RuntimeError and changes nothing.

    runtime=True also instruments the running event loop and the garbage
    collector (instrument_runtime); it needs a running loop (RuntimeError,
    declaring nothing, without one)."""
    loop = asyncio.get_running_loop() if runtime else None
    _abi.declare_server(name, server_type)
    if loop is not None:
        instrument_runtime(loop, server_name=name)
