"""The resources-operation scope's __aenter__ and __aexit__ (the extension's,
in C) drive the limit's own: what the limit's awaitables yield, raise and
return, a cancellation or a timeout while queued, and what is counted for
each, read back through gym-exporter. Each test uses an (operation,
executor) pair of its own and compares counts before and after."""
import asyncio

import pytest

from conftest import scrape, value
from gym_metrics import resources_operation, ResourcesOperation


def run(coro):
    return asyncio.run(coro)


def counts(operation, executor):
    s = scrape()
    pair = {"nemo_gym_resources_operation": operation, "nemo_gym_resources_executor": executor}

    def get(name, **more):
        return value(s, name, **pair, **more) or 0
    return {
        "queued": get("gym_resources_operation_queued"),
        "active": get("gym_resources_operation_active"),
        "waited": get("gym_resources_operation_queue_duration_seconds_count",
                      nemo_gym_concurrency_wait_outcome="admitted"),
        "gave_up": get("gym_resources_operation_queue_duration_seconds_count",
                       nemo_gym_concurrency_wait_outcome="cancelled"),
        "timed_out": get("gym_resources_operation_queue_duration_seconds_count",
                         nemo_gym_concurrency_wait_outcome="timeout"),
        "ok": get("gym_resources_operation_duration_seconds_count",
                  nemo_gym_resources_operation_outcome="ok"),
        "error": get("gym_resources_operation_duration_seconds_count",
                     nemo_gym_resources_operation_outcome="error"),
    }


class SlowLimit:
    """An async context manager whose enter and exit each yield to the loop
    `steps` times (futures the loop resolves) before they finish: a limit
    that is not asyncio's semaphore. Records what each returned and raised."""

    def __init__(self, steps=3, enter_error=None, exit_error=None):
        self.steps, self.enter_error, self.exit_error = steps, enter_error, exit_error
        self.entered = self.exited = 0

    async def _yield(self):
        for _ in range(self.steps):
            await asyncio.sleep(0)

    async def __aenter__(self):
        await self._yield()
        if self.enter_error:
            raise self.enter_error
        self.entered += 1
        return "the limit's own value"

    async def __aexit__(self, *exc):
        await self._yield()
        self.exited += 1
        if self.exit_error:
            raise self.exit_error
        return True  # would suppress; the scope never does


def test_a_limit_that_yields_is_driven_through_and_the_scope_is_what_as_gives():
    async def body():
        before = counts("other", "thread")
        limit = SlowLimit(steps=3)
        scope = resources_operation(limit, "other", "thread")
        async with scope as op:
            assert op is scope and isinstance(op, ResourcesOperation)
            assert limit.entered == 1 and limit.exited == 0
        assert limit.exited == 1
        with pytest.raises(KeyError):  # the limit's __aexit__ returns True; not suppressed
            async with resources_operation(limit, "other", "thread"):
                raise KeyError("kept")
        after = counts("other", "thread")
        assert after["ok"] - before["ok"] == 1
        assert after["error"] - before["error"] == 1
        assert after["waited"] - before["waited"] == 2
        assert after["active"] == 0 and after["queued"] == 0
    run(body())


def test_a_limit_whose_enter_raises_leaves_nothing_queued_and_its_error_propagates():
    async def body():
        before = counts("other", "process")
        limit = SlowLimit(steps=2, enter_error=OSError("no slot"))
        with pytest.raises(OSError, match="no slot"):
            async with resources_operation(limit, "other", "process"):
                pytest.fail("entered")
        after = counts("other", "process")
        assert after["queued"] == 0 and after["active"] == 0
        assert after["waited"] == before["waited"], "a wait that never got a slot"
        assert after["gave_up"] - before["gave_up"] == 1, "is recorded as abandoned"
        assert limit.exited == 0
    run(body())


def test_a_limit_whose_exit_raises_still_counts_the_operation_finished():
    async def body():
        before = counts("other", "subprocess")
        limit = SlowLimit(steps=1, exit_error=OSError("exit failed"))
        with pytest.raises(OSError, match="exit failed"):
            async with resources_operation(limit, "other", "subprocess"):
                pass
        after = counts("other", "subprocess")
        assert after["ok"] - before["ok"] == 1
        assert after["active"] == 0
    run(body())


def test_a_cancellation_or_a_timeout_while_queued_ends_the_wait_uncounted_as_run():
    async def body():
        before = counts("other", "inline")
        sem = asyncio.Semaphore(1)
        await sem.acquire()

        async def op():
            async with resources_operation(sem, "other", "inline"):
                pytest.fail("admitted")
        task = asyncio.ensure_future(op())
        await asyncio.sleep(0.01)
        assert counts("other", "inline")["queued"] == 1
        task.cancel()  # thrown into the semaphore's acquire, through the scope
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(op(), 0.02)
        after = counts("other", "inline")
        assert after["queued"] == 0 and after["active"] == 0
        assert after["waited"] == before["waited"]
        assert after["gave_up"] - before["gave_up"] == 2  # cancelled, and by wait_for
        assert after["ok"] == before["ok"] and after["error"] == before["error"]
        sem.release()
        assert sem._value == 1 and not sem._waiters, "the semaphore's line is as it was"
        async with resources_operation(sem, "other", "inline"):
            assert sem._value == 0
        assert counts("other", "inline")["ok"] - before["ok"] == 1
    run(body())


def test_a_scope_is_entered_once_at_a_time_and_can_be_entered_again_after():
    async def body():
        limit = asyncio.Semaphore(2)
        scope = resources_operation(limit, "tool", "other")
        async with scope:
            with pytest.raises(RuntimeError, match="entered already"):
                await scope.__aenter__()
        with pytest.raises(RuntimeError, match="not entered"):
            await scope.__aexit__(None, None, None)
        async with scope:
            assert limit._value == 1
        assert limit._value == 2
        scope.outcome = "timeout"
        assert scope.outcome == "timeout"
        scope.outcome = None
        with pytest.raises(ValueError, match=r"unknown outcome 'late'; one of \['cancelled'"):
            scope.outcome = "late"
    run(body())


def test_names_made_at_run_time_count_as_the_same_operation_as_literals():
    """The extension finds a kind by its names' str objects first: names
    made at run time (new objects each call, freed after, more than it
    keeps) must reach the series their text names, never another's."""
    async def body():
        before = counts("judge", "process"), counts("verify", "thread")
        limit = asyncio.Semaphore(1)
        scopes = []
        for i in range(60):  # a freed name's memory is the next name's
            if i % 2:
                operation, executor = "".join(["ju", "dge"]), "".join(["pro", "cess"])
            else:
                operation, executor = "".join(["ver", "ify"]), "".join(["thr", "ead"])
            scopes.append(resources_operation(limit, operation, executor))
            if i % 4 < 2:  # in both orders: either may be freed last, reused first
                del operation, executor
            else:
                del executor, operation
        scopes.append(resources_operation(limit, "judge", "process"))
        for scope in scopes:
            async with scope:
                pass
        after = counts("judge", "process"), counts("verify", "thread")
        assert after[0]["ok"] - before[0]["ok"] == 31
        assert after[1]["ok"] - before[1]["ok"] == 30
        with pytest.raises(ValueError, match="unknown operation 'judges'"):
            resources_operation(limit, "".join(["judge", "s"]), "process")
    run(body())


def test_arguments_are_taken_as_a_python_function_with_keyword_only_ids_takes_them():
    async def body():
        before = counts("verify", "process")
        limit = asyncio.Semaphore(1)
        scope = resources_operation(executor="process", limit=limit, operation="verify")
        assert isinstance(scope, ResourcesOperation)
        async with scope:
            pass
        direct = ResourcesOperation(limit, "verify", "process")
        async with direct:
            with pytest.raises(RuntimeError, match="entered already"):
                direct.__init__(limit, "verify", "process")
        assert counts("verify", "process")["ok"] - before["ok"] == 2
    run(body())
    limit = asyncio.Semaphore(1)
    for args, kwargs, message in [
            ((limit, "verify"), {}, "missing required argument 'executor'"),
            ((limit, "verify", "process", "0" * 32), {}, "takes 3 positional arguments"),
            ((limit, "verify", "process"), {"trace": None}, "unexpected keyword argument 'trace'"),
            ((limit, "verify", "process"), {"limit": limit}, "multiple values for keyword"),
    ]:
        with pytest.raises(TypeError, match=message):
            resources_operation(*args, **kwargs)


def test_an_admission_timeout_is_a_timed_out_wait_with_its_length():
    """Every wait that ends adds its time to the queue duration, so that
    the time waited per second is the mean number queued (Little's law)."""
    async def body():
        from gym_metrics import MeteredSemaphore
        sem = MeteredSemaphore(1, "resources_server", "scope_timeouts", admission_timeout_s=0.03)
        await sem.acquire()
        before = counts("verify", "thread")
        with pytest.raises(TimeoutError):
            async with resources_operation(sem, "verify", "thread"):
                pytest.fail("admitted")
        after = counts("verify", "thread")
        assert after["timed_out"] - before["timed_out"] == 1
        assert after["gave_up"] == before["gave_up"] and after["waited"] == before["waited"]
        waited = value(scrape(), "gym_resources_operation_queue_duration_seconds_sum",
                       nemo_gym_resources_operation="verify", nemo_gym_resources_executor="thread",
                       nemo_gym_concurrency_wait_outcome="timeout")
        assert waited >= 0.03
        sem.release()
    run(body())
