"""The seeds' semantics, one test each, read back through gym-exporter."""
import asyncio
import gc
import os
import re
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from conftest import BUILD, REGISTRY, scrape, value
import gym_metrics
from gym_metrics import MeteredSemaphore, declare_server, resources_operation


def run(coro):
    return asyncio.run(coro)


def labels(name, component="agent_server", server=None):
    out = {"nemo_gym_concurrency_component": component, "nemo_gym_concurrency_limit_name": name}
    if server:
        out["nemo_gym_server_name"] = server
    return out


def test_properties():
    async def body():
        sem = MeteredSemaphore(3, "agent_server", "props", server_name="agent_a",
                               admission_timeout_s=2.5)
        assert isinstance(sem, asyncio.BoundedSemaphore), "as the seeds document it"
        assert repr(sem) == "<MeteredSemaphore props limit=3 active=0 queued=0>"
        assert (sem.limit, sem.active, sem.queued, sem.admission_timeout_s) == (3, 0, 0, 2.5)
        assert sem.attributes == labels("props", server="agent_a")
        async with sem:
            assert sem.active == 1
            assert not sem.locked()
            s = scrape()
            assert value(s, "gym_concurrency_limit", **labels("props", server="agent_a")) == 3
            assert value(s, "gym_concurrency_active", **labels("props", server="agent_a")) == 1
            assert value(s, "gym_concurrency_available", **labels("props", server="agent_a")) == 2
        assert sem.active == 0
    run(body())


def test_limits_with_the_same_labels_are_summed():
    async def body():
        a = MeteredSemaphore(2, "model_server", "summed")
        b = MeteredSemaphore(5, "model_server", "summed")
        await a.acquire()
        await b.acquire()
        await b.acquire()
        s = scrape()
        assert value(s, "gym_concurrency_limit", **labels("summed", "model_server")) == 7
        assert value(s, "gym_concurrency_active", **labels("summed", "model_server")) == 3
        a.release(); b.release(); b.release()
    run(body())


def test_a_garbage_collected_limit_no_longer_reports_but_its_counters_stay():
    async def body():
        sem = MeteredSemaphore(1, "other", "collected", admission_timeout_s=0.01)
        await sem.acquire()
        with pytest.raises(TimeoutError):
            await sem.acquire()
        sem.release()
        del sem
        gc.collect()
        s = scrape()
        assert value(s, "gym_concurrency_limit", **labels("collected", "other")) is None
        assert value(s, "gym_concurrency_admission_timeouts_total",
                     **labels("collected", "other")) == 1
    run(body())


def test_timeouts_are_raised_counted_and_reported_only_for_limits_with_a_timeout():
    async def body():
        timed = MeteredSemaphore(1, "resources_server", "timed", admission_timeout_s=0.02)
        plain = MeteredSemaphore(1, "resources_server", "untimed")
        await timed.acquire()
        with pytest.raises(TimeoutError):
            await timed.acquire()
        assert timed.queued == 0
        s = scrape()
        assert value(s, "gym_concurrency_admission_timeouts_total",
                     **labels("timed", "resources_server")) == 1
        assert value(s, "gym_concurrency_admission_timeouts_total",
                     **labels("untimed", "resources_server")) is None
        assert value(s, "gym_concurrency_admission_cancelled_total",
                     **labels("timed", "resources_server")) == 0
        timed.release()
        del plain
    run(body())


def test_cancelled_waits_are_counted_also_under_wait_for():
    async def body():
        sem = MeteredSemaphore(1, "agent_server", "cancels", admission_timeout_s=60)
        await sem.acquire()
        waiter = asyncio.ensure_future(sem.acquire())
        await asyncio.sleep(0.01)
        assert sem.queued == 1
        assert value(scrape(), "gym_concurrency_queue_depth", **labels("cancels")) == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        # The seed: wrapping acquire in wait_for counts as a cancellation.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(sem.acquire(), 0.01)
        assert sem.queued == 0
        s = scrape()
        assert value(s, "gym_concurrency_admission_cancelled_total", **labels("cancels")) == 2
        assert value(s, "gym_concurrency_admission_timeouts_total", **labels("cancels")) == 0
        assert value(s, "gym_concurrency_queue_depth", **labels("cancels")) == 0
        sem.release()
    run(body())


def test_a_waiter_cancelled_after_being_handed_a_slot_was_admitted_and_passes_it_on():
    """The hand-off is the admission (the semaphore's state changes there):
    a waiter cancelled after it and before its task resumed was admitted, and
    its hold ends at once, handing the slot to the next waiter."""
    async def body():
        sem = MeteredSemaphore(1, "agent_server", "handed", admission_timeout_s=60)
        await sem.acquire()
        first = asyncio.ensure_future(sem.acquire())
        second = asyncio.ensure_future(sem.acquire())
        await asyncio.sleep(0.01)
        sem.release()   # the slot is handed to `first`, admitted now...
        s = scrape()
        assert (sem.active, sem.queued) == (1, 1)
        assert value(s, "gym_concurrency_queue_depth", **labels("handed")) == 1
        assert value(s, "gym_concurrency_admissions_total", **labels("handed")) == 2
        first.cancel()  # ...and cancelled before it resumes
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await second is True  # the slot went on
        s = scrape()
        assert value(s, "gym_concurrency_admission_cancelled_total", **labels("handed")) == 0
        assert value(s, "gym_concurrency_admissions_total", **labels("handed")) == 3
        assert value(s, "gym_concurrency_queue_depth", **labels("handed")) == 0
        assert value(s, "gym_concurrency_active", **labels("handed")) == 1
        sem.release()
        s = scrape()
        assert value(s, "gym_concurrency_active", **labels("handed")) == 0
        assert value(s, "gym_concurrency_available", **labels("handed")) == 1
    run(body())


def test_under_random_cancels_and_timeouts_the_counts_are_what_callers_saw():
    async def body():
        import random
        rng = random.Random(7)
        sem = MeteredSemaphore(4, "agent_server", "random", admission_timeout_s=0.03)
        seen = {"ok": 0, "cancelled": 0, "timeout": 0}

        async def caller():
            try:
                await sem.acquire()
            except asyncio.CancelledError:
                seen["cancelled"] += 1
                return
            except TimeoutError:
                seen["timeout"] += 1
                return
            seen["ok"] += 1
            try:
                await asyncio.sleep(rng.random() * 0.005)
            finally:
                sem.release()

        # A task cancelled before it runs never waits; one cancelled while it
        # holds was admitted: neither is a cancelled wait.
        tasks = [asyncio.ensure_future(caller()) for _ in range(400)]
        for _ in range(60):
            await asyncio.sleep(0.001)
            for t in rng.sample(tasks, 1):
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        s = scrape()
        # Every wait's end counted once. A waiter cancelled after its slot
        # was handed to it (or after its admission timeout fired) but before
        # it resumed sees CancelledError and is counted an admission (or a
        # timeout), as the semaphore saw it when its state changed.
        ends = seen["ok"] + seen["cancelled"] + seen["timeout"]
        admitted = value(s, "gym_concurrency_admissions_total", **labels("random"))
        failed = (value(s, "gym_concurrency_admission_cancelled_total", **labels("random")) +
                  value(s, "gym_concurrency_admission_timeouts_total", **labels("random")))
        assert admitted + failed == ends
        assert seen["ok"] <= admitted
        assert value(s, "gym_concurrency_queue_depth", **labels("random")) == 0
        assert value(s, "gym_concurrency_active", **labels("random")) == 0
    run(body())


def test_waiters_are_admitted_in_turn():
    async def body():
        sem = MeteredSemaphore(2, "rollout_driver", "turns")
        most = 0

        async def worker():
            nonlocal most
            async with sem:
                most = max(most, sem.active)
                await asyncio.sleep(0.001)

        await asyncio.gather(*(worker() for _ in range(20)))
        assert most == 2
        assert (sem.active, sem.queued) == (0, 0)
        assert value(scrape(), "gym_concurrency_active", **labels("turns", "rollout_driver")) == 0
    run(body())


def test_over_release_raises_value_error_and_changes_no_number():
    async def body():
        sem = MeteredSemaphore(2, "other", "over")
        with pytest.raises(ValueError):
            sem.release()
        await sem.acquire()
        sem.release()
        with pytest.raises(ValueError):
            sem.release()
        assert sem.active == 0
        assert value(scrape(), "gym_concurrency_available", **labels("over", "other")) == 2
    run(body())


@pytest.mark.parametrize("args,needle", [
    ((0, "agent_server", "x"), "at least 1"),
    ((1, "nowhere", "x"), "nowhere"),
    ((1, "agent_server", "Bad-Name"), "Bad-Name"),
    ((1, "agent_server", "x" * 65), "x" * 65),
    ((1, "agent_server", "x", "s" * 129), "s" * 129),
    ((1, "agent_server", "x", None, -1), "admission timeout"),
])
def test_invalid_limits_are_rejected(args, needle):
    with pytest.raises(ValueError, match=needle):
        MeteredSemaphore(*args)


def outcome_count(s, operation, executor, outcome):
    return value(s, "gym_resources_operation_duration_seconds_count",
                 nemo_gym_resources_operation=operation, nemo_gym_resources_executor=executor,
                 nemo_gym_resources_operation_outcome=outcome)


def test_outcomes_explicit_wins_then_cancelled_then_error_then_ok():
    async def body():
        limit = asyncio.Semaphore(2)
        async with resources_operation(limit, "judge", "inline") as op:
            pass
        with pytest.raises(RuntimeError):
            async with resources_operation(limit, "judge", "inline") as op:
                raise RuntimeError("boom")
        with pytest.raises(RuntimeError):
            async with resources_operation(limit, "judge", "inline") as op:
                op.outcome = "crashed"
                raise RuntimeError("boom")
        async with resources_operation(limit, "judge", "inline") as op:
            op.outcome = "timeout"

        async def cancelled():
            async with resources_operation(limit, "judge", "inline"):
                await asyncio.sleep(10)
        task = asyncio.ensure_future(cancelled())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert limit._value == 2, "every operation left its limit"
        s = scrape()
        assert outcome_count(s, "judge", "inline", "ok") == 1
        assert outcome_count(s, "judge", "inline", "error") == 1
        assert outcome_count(s, "judge", "inline", "crashed") == 1
        assert outcome_count(s, "judge", "inline", "timeout") == 1
        assert outcome_count(s, "judge", "inline", "cancelled") == 1
        assert value(s, "gym_resources_operation_queue_duration_seconds_count",
                     nemo_gym_resources_operation="judge",
                     nemo_gym_resources_executor="inline") == 5
        assert value(s, "gym_resources_operation_active", nemo_gym_resources_operation="judge",
                     nemo_gym_resources_executor="inline") == 0
    run(body())


def test_an_operation_counts_as_queued_while_waiting_and_records_its_durations():
    async def body():
        sem = MeteredSemaphore(1, "resources_server", "verifiers_q")
        await sem.acquire()

        async def op():
            async with resources_operation(sem, "tool", "process") as o:
                await asyncio.sleep(0.02)
        task = asyncio.ensure_future(op())
        await asyncio.sleep(0.01)
        s = scrape()
        assert value(s, "gym_resources_operation_queued", nemo_gym_resources_operation="tool",
                     nemo_gym_resources_executor="process") == 1
        await asyncio.sleep(0.03)
        sem.release()
        await task
        s = scrape()
        assert value(s, "gym_resources_operation_queued", nemo_gym_resources_operation="tool",
                     nemo_gym_resources_executor="process") == 0
        queue_sum = value(s, "gym_resources_operation_queue_duration_seconds_sum",
                          nemo_gym_resources_operation="tool",
                          nemo_gym_resources_executor="process")
        assert queue_sum >= 0.03
        run_sum = value(s, "gym_resources_operation_duration_seconds_sum",
                        nemo_gym_resources_operation="tool",
                        nemo_gym_resources_executor="process")
        assert run_sum >= 0.02
    run(body())


def test_invalid_operation_executor_and_outcome_are_rejected():
    async def body():
        limit = asyncio.Semaphore(1)
        with pytest.raises(ValueError, match="dance"):
            async with resources_operation(limit, "dance", "inline"):
                pass
        with pytest.raises(ValueError, match="teleport"):
            async with resources_operation(limit, "tool", "teleport"):
                pass
        async with resources_operation(limit, "tool", "inline") as op:
            with pytest.raises(ValueError, match="exploded"):
                op.outcome = "exploded"
        assert limit._value == 1
        with pytest.raises(ValueError):
            declare_server("", "x")
    run(body())


LATE_DECLARATION = textwrap.dedent("""
    import asyncio
    import gym_metrics
    async def main():
        sem = gym_metrics.MeteredSemaphore(2, "resources_server", "py_late")
        async with gym_metrics.resources_operation(sem, "tool", "inline"):
            pass
        try:
            gym_metrics.declare_server("late", "resources_server")
        except RuntimeError as e:
            print("refused:", e)
    asyncio.run(main())
""")


def test_declaring_a_server_after_the_first_operation_raises_and_changes_nothing(tmp_path):
    env = dict(os.environ, GYM_METRICS_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", LATE_DECLARATION], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert out.startswith("refused:"), out
    assert "before the first operation" in out
    s = scrape(str(tmp_path))
    assert value(s, "gym_resources_operation_duration_seconds_count",
                 nemo_gym_resources_operation="tool", nemo_gym_resources_executor="inline") == 1
    assert value(s, "gym_server_processes", nemo_gym_server_name="late") is None


WRITER = textwrap.dedent("""
    import asyncio, sys
    import gym_metrics
    gym_metrics.declare_server("py_verifier", "resources_server")
    async def main():
        sem = gym_metrics.MeteredSemaphore(4, "resources_server", "py_e2e",
                                           server_name="py_verifier")
        await sem.acquire()
        async with gym_metrics.resources_operation(sem, "verify", "subprocess") as op:
            op.outcome = "timeout"
        print("ready", flush=True)
        sys.stdin.read()
    asyncio.run(main())
""")


def test_python_writers_beside_a_cpp_writer_end_to_end(tmp_path):
    registry = str(tmp_path / "registry")
    env = dict(os.environ, GYM_METRICS_DIR=registry)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for _ in range(2)]
    demo = subprocess.Popen([os.path.join(BUILD, "demo", "gym-demo"),
                             f"--registry.dir={registry}"], stderr=subprocess.DEVNULL)
    try:
        for w in writers:
            assert w.stdout.readline().strip() == "ready"
        import time
        time.sleep(1)
        s = scrape(registry)
        l = labels("py_e2e", "resources_server", server="py_verifier")
        assert value(s, "gym_concurrency_limit", **l) == 8
        assert value(s, "gym_concurrency_active", **l) == 2
        assert outcome_count(s, "verify", "subprocess", "timeout") >= 2
        assert value(s, "gym_resources_operation_duration_seconds_count",
                     nemo_gym_server_name="py_verifier",
                     nemo_gym_resources_operation_outcome="timeout") == 2
        # The C++ demo's series, in the same exposition.
        assert value(s, "gym_concurrency_limit", nemo_gym_concurrency_limit_name="rollouts") == 16
        # Declared Python servers are sampled for memory with no configuration.
        assert value(s, "gym_server_processes", nemo_gym_server_name="py_verifier") >= 1
    finally:
        for w in writers:
            w.stdin.close()
            w.wait(timeout=10)
        demo.terminate()
        demo.wait(timeout=10)


def contract_values(name):
    """The values of one of gym/contract.h's tables (kComponents, ...), as the
    C++ library and the exporter know them."""
    import re
    header = os.path.join(os.path.dirname(__file__), "..", "..", "lib", "include", "gym",
                          "contract.h")
    text = open(header).read()
    m = re.search(rf"\b{name} = \{{([^}}]*)\}};", text)
    assert m, f"{name} is not in {header}"
    return frozenset(re.findall(r'"([^"]*)"', m.group(1)))


def test_the_value_sets_are_the_contracts():
    assert gym_metrics.COMPONENTS == contract_values("kComponents")
    assert gym_metrics.OPERATIONS == contract_values("kOperations")
    assert gym_metrics.EXECUTORS == contract_values("kExecutors")
    assert gym_metrics.OUTCOMES == contract_values("kOutcomes")
    assert len(contract_values("kWaitOutcomes")) == 3, "the parser reads every table"


TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


def exemplars(url, family):
    """[(trace_id, span_id, value)] of `family`'s bucket lines in an
    OpenMetrics scrape."""
    req = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text"})
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    return [(m.group(1), m.group(2), float(m.group(3))) for m in re.finditer(
        rf'^{family}_bucket\{{[^}}]*\}} \d+ # \{{trace_id="([0-9a-f]{{32}})",'
        r'span_id="([0-9a-f]{16})"\} (\S+) \S+$', text, re.M)]


def test_an_operations_and_a_waits_trace_are_their_buckets_exemplars(served_exporter):
    async def body():
        async with resources_operation(asyncio.Semaphore(1), "judge", "thread",
                                       trace_id=int(TRACE, 16), span_id=SPAN.upper()):
            await asyncio.sleep(0.01)
        sem = MeteredSemaphore(1, "resources_server", "traced_waits")
        await sem.acquire()
        waiter = asyncio.ensure_future(sem.acquire(trace_id=TRACE, span_id=int(SPAN, 16)))
        await asyncio.sleep(0.02)
        sem.release()
        await waiter
        sem.release()
    run(body())
    ops = exemplars(served_exporter, "gym_resources_operation_duration_seconds")
    assert any(t == TRACE and s == SPAN and v >= 0.01 for t, s, v in ops), ops
    waits = exemplars(served_exporter, "gym_concurrency_wait_duration_seconds")
    assert any(t == TRACE and s == SPAN and v >= 0.02 for t, s, v in waits), waits


def test_a_timed_out_and_a_cancelled_waits_traces_are_their_buckets_exemplars(served_exporter):
    """As the C and C++ writers do: the slow wait that failed is the one
    whose trace a user wants."""
    late, gone = "ab" * 16, "cd" * 16
    async def body():
        sem = MeteredSemaphore(1, "resources_server", "failed_traced_waits",
                               admission_timeout_s=0.03)
        await sem.acquire()
        with pytest.raises(TimeoutError):
            await sem.acquire(trace_id=late, span_id=SPAN)
        waiter = asyncio.ensure_future(sem.acquire(trace_id=gone, span_id=SPAN))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        sem.release()
    run(body())
    waits = exemplars(served_exporter, "gym_concurrency_wait_duration_seconds")
    assert any(t == late and s == SPAN and v >= 0.03 for t, s, v in waits), waits
    assert any(t == gone and s == SPAN and v >= 0.01 for t, s, v in waits), waits


def test_the_current_opentelemetry_span_is_taken_when_no_ids_are_given(served_exporter,
                                                                        monkeypatch):
    """The opentelemetry API as it documents itself: get_current_span() gives
    a span whose get_span_context() has trace_id and span_id (ints) and
    is_valid; a faked module stands in for it (no package index here)."""
    class Context:
        trace_id = 0x1234567890abcdef1234567890abcdef
        span_id = 0x1122334455667788
        is_valid = True

    class Span:
        def get_span_context(self):
            return Context()

    class FakeTrace:
        @staticmethod
        def get_current_span():
            return Span()

    monkeypatch.setattr(gym_metrics, "_otel_trace", FakeTrace)

    async def body():
        async with resources_operation(asyncio.Semaphore(1), "tool", "thread"):
            pass
        Context.is_valid = False  # no current span: no exemplar
        async with resources_operation(asyncio.Semaphore(1), "tool", "subprocess"):
            pass
    run(body())
    ops = exemplars(served_exporter, "gym_resources_operation_duration_seconds")
    assert ("1234567890abcdef1234567890abcdef", "1122334455667788") in {(t, s) for t, s, _ in ops}
    assert len({(t, s) for t, s, _ in ops if t == "1234567890abcdef1234567890abcdef"}) == 1


@pytest.mark.parametrize("trace_id, span_id", [
    (TRACE, None), (None, SPAN), ("xyz", SPAN), (TRACE[:-1], SPAN), (0, SPAN), (-1, SPAN),
    (1 << 128, SPAN), ("0" * 32, SPAN), (TRACE, 1 << 64), (True, SPAN)])
def test_a_malformed_trace_context_is_a_value_error(trace_id, span_id):
    with pytest.raises(ValueError):
        resources_operation(asyncio.Semaphore(1), "tool", "inline", trace_id=trace_id,
                            span_id=span_id)

    async def acquire():  # a free slot too: the ids are checked before it is taken
        sem = MeteredSemaphore(1, "resources_server", "malformed_trace")
        await sem.acquire(trace_id=trace_id, span_id=span_id)
    with pytest.raises(ValueError):
        run(acquire())
