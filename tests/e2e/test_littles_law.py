"""Little's law on gym-demo: for every limit and every resources operation,
the mean number waiting (the queue gauge, averaged over time from scrapes)
equals the wait time accumulated per second (the increase of the wait
histogram's sum). Waits that end in a timeout or a cancellation are in the
queue while they wait, so they must be in the histogram too: the math
verifier's operations, whose limit times out, were 32% apart when they were
not."""
import re
import time
import urllib.request

from pace import HTTP_S, SANITIZED
from test_gym_stat import exporter, lone_demo, registry, start_exporter  # noqa: F401

RUN_S = 90 if SANITIZED else 30
# Mean waiting and the rate of waited seconds agree within this (scrapes
# sample the gauge; the waits in progress at the two ends are not counted).
TOLERANCE = 0.15
PAIRS = {  # queue gauge -> the wait histogram's sum
    "gym_resources_operation_queued": "gym_resources_operation_queue_duration_seconds_sum",
    "gym_concurrency_queue_depth": "gym_concurrency_wait_duration_seconds_sum",
}
LINE = re.compile(r'^(\w+)\{(.*)\} (\S+)$')
BY_HOW = "nemo_gym_concurrency_wait_outcome"


def scrape(port):
    """{(family, labels without how the wait ended): value, summed}."""
    names = "&".join(f"name[]={n}" for n in PAIRS) + "&" + "&".join(
        "name[]=" + s.removesuffix("_sum") for s in PAIRS.values())
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?{names}",
                                  timeout=HTTP_S).read().decode()
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m or (m.group(1) not in PAIRS and m.group(1) not in PAIRS.values()):
            continue
        labels = tuple(sorted(kv for kv in re.findall(r'(\w+)="([^"]*)"', m.group(2))
                              if kv[0] != BY_HOW))
        out[(m.group(1), labels)] = out.get((m.group(1), labels), 0.0) + float(m.group(3))
    return out


def test_the_mean_number_waiting_is_the_wait_time_per_second(lone_demo, tmp_path):
    ex, port = start_exporter(tmp_path, f"--registry.dir={lone_demo}")
    try:
        time.sleep(2)  # the demo's queues fill
        samples = []
        end = time.monotonic() + RUN_S
        while time.monotonic() < end:
            samples.append((time.monotonic(), scrape(port)))
            time.sleep(0.05)
    finally:
        ex.terminate()
        ex.wait()
    (t0, first), (t1, last) = samples[0], samples[-1]
    assert len(samples) >= 20, len(samples)
    checked, apart = [], []
    for gauge, total in PAIRS.items():
        for key in [k for k in last if k[0] == gauge]:
            mean = sum((a.get(key, 0) + b.get(key, 0)) / 2 * (tb - ta)
                       for (ta, a), (tb, b) in zip(samples, samples[1:])) / (t1 - t0)
            rate = (last.get((total, key[1]), 0) - first.get((total, key[1]), 0)) / (t1 - t0)
            if max(mean, rate) < 0.05:
                continue  # too few waits to tell noise from a difference
            checked.append((gauge, key[1]))
            if abs(mean - rate) > TOLERANCE * max(mean, rate):
                apart.append((gauge, dict(key[1]), round(mean, 3), round(rate, 3)))
    assert any(g == "gym_resources_operation_queued" for g, _ in checked), checked
    assert any(g == "gym_concurrency_queue_depth" for g, _ in checked), checked
    assert apart == []
