"""gym-stat as a user runs it: under tmux against gym-demo (keys sent, screen
captured), --once, and --json against its schema and against the exporter's
/metrics and /api/v1/snapshot taken at the same moment."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import jsonschema
import pytest

from pace import HTTP_S, SHM_PREFIX, STOP_S

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("GYM_BUILD_DIR", os.path.join(SOURCE, "build"))
STAT = os.path.join(BUILD, "stat", "gym-stat")
DEMO = os.path.join(BUILD, "demo", "gym-demo")
EXPORTER = os.path.join(BUILD, "exporter", "gym-exporter")
SCHEMA = json.load(open(os.path.join(SOURCE, "docs", "snapshot.schema.json")))


@pytest.fixture
def registry():
    d = tempfile.mkdtemp(prefix=SHM_PREFIX + "stat-", dir="/dev/shm")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def exporter(registry, tmp_path_factory):
    """The host's exporter, as a user runs one beside Gym: it retires the
    segments of the demo's exited verifiers (without it they pile up, about
    a dozen a second, and every fresh read-only reader reads them all). Its port."""
    ex, port = start_exporter(tmp_path_factory.mktemp("host"), f"--registry.dir={registry}")
    yield port
    ex.send_signal(signal.SIGTERM)
    ex.wait(timeout=STOP_S)


def run_demo(registry):
    # Long enough for a sanitized exporter to start and be read several times
    # on a loaded machine (its limits go with it); stopped below in any case.
    p = subprocess.Popen([DEMO, f"--registry.dir={registry}", "--duration=600"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield registry
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=STOP_S)


@pytest.fixture
def demo(registry, exporter):
    yield from run_demo(registry)


@pytest.fixture
def lone_demo(registry):
    """The demo before any exporter: for a test that starts its own."""
    yield from run_demo(registry)


def stat_json(registry):
    out = subprocess.run([STAT, f"--registry.dir={registry}", "--json"], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    return doc


def wait_for_limits(registry, n=5):
    for _ in range(100):
        doc = stat_json(registry)
        if len(doc["limits"]) >= n and any(l["queue_depth"] > 0 for l in doc["limits"]):
            return doc
        time.sleep(0.1)
    raise AssertionError(f"the demo's limits did not appear: {doc['limits']}")


def configured_limits(registry):
    """(server or '-', limit name) -> limit, from gym-exporter --once (read-only beside)."""
    out = subprocess.run([EXPORTER, "--once", f"--registry.dir={registry}"], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    limits = {}
    for line in out.splitlines():
        if not line.startswith("gym_concurrency_limit{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        key = (labels.get("nemo_gym_server_name", "-"), labels["nemo_gym_concurrency_limit_name"])
        limits[key] = int(float(line.rsplit(" ", 1)[1]))
    return limits


class Tmux:
    def __init__(self, command):
        self.name = f"gym-stat-{os.getpid()}-{time.monotonic_ns()}"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "200", "-y", "80",
                        command], check=True)

    def screen(self):
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], check=True,
                              capture_output=True, text=True).stdout

    def screen_until(self, accept, seconds=15):
        """The screen once accept(screen) holds, or the last one after
        `seconds`: a key is answered at the next refresh, which a slow
        (sanitized) build on a loaded machine can take seconds to draw."""
        deadline = time.monotonic() + seconds
        while True:
            screen = self.screen()
            if accept(screen) or time.monotonic() > deadline:
                return screen
            time.sleep(0.1)

    def keys(self, *keys):
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def alive(self):
        return subprocess.run(["tmux", "has-session", "-t", self.name],
                              capture_output=True).returncode == 0

    def kill(self):
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def limit_rows(screen):
    """(server, limit name) -> (active, limit, queue) from the LIMITS table."""
    rows = {}
    for line in screen.splitlines():
        m = re.match(r"^(\S+)\s+(\S+)\s+(\S+)\s+\[[#.]+\]\s+(\d+)/(\d+)\s+(\d+)\s", line)
        if m:
            rows[(m.group(1), m.group(3))] = (int(m.group(4)), int(m.group(5)), int(m.group(6)))
    return rows


def test_the_screen_shows_every_demo_limit_with_its_configured_limit_and_a_moving_queue(demo):
    wait_for_limits(demo)
    want = configured_limits(demo)
    assert len(want) == 5, want
    t = Tmux(f"TERM=xterm {STAT} --registry.dir={demo} --interval=0.3")
    try:
        queues = set()
        rows = {}
        for _ in range(60):
            time.sleep(0.2)
            rows = limit_rows(t.screen())
            if set(rows) == set(want):
                queues.add(tuple(sorted((k, v[2]) for k, v in rows.items())))
            if len(queues) >= 3:
                break
        assert {k: v[1] for k, v in rows.items()} == want, t.screen()
        assert len(queues) >= 3, "the queue depths did not move between refreshes"
        assert "sort: saturation" in t.screen()
        t.keys("s")
        screen = t.screen_until(lambda s: "sort: queue" in s)
        assert "sort: queue" in screen, screen

        def only_math(s):
            shown = limit_rows(s)
            return shown and all(server == "math_verifier" for server, _ in shown)

        t.keys("/", "math", "Enter")
        screen = t.screen_until(only_math)
        assert only_math(screen), screen
        t.keys("c")
        screen = t.screen_until(lambda s: set(limit_rows(s)) == set(want))
        assert set(limit_rows(screen)) == set(want), screen
        t.keys("q")
        for _ in range(STOP_S * 10):
            if not t.alive():
                break
            time.sleep(0.1)
        assert not t.alive(), "q did not quit"
    finally:
        t.kill()


def test_once_prints_one_plain_table_without_escape_codes(demo):
    wait_for_limits(demo)
    out = subprocess.run([STAT, f"--registry.dir={demo}", "--once", "--interval=0.3"],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    assert "\x1b" not in out
    assert out.count("LIMITS (") == 1 and "OPERATIONS" in out and "WRITERS" in out
    assert set(limit_rows(out)) == set(configured_limits(demo))
    # Rates over the interval: some operation ran.
    assert re.search(r"^\S+\s+(verify|tool|judge|other)\s+\S+\s+\d+\s+\d+\s+\d+\.\d", out, re.M)
    # The servers' event loops: the judge's lag p99 (over the interval: "-"
    # when its loop was blocked all along) and blocked time, "-" for servers
    # without an instrumented loop.
    assert "LAG P99" in out and "BLOCKED" in out
    assert re.search(r"^llm_judge\s.*\s(\d+ms|\d+\.\d\ds|-)\s+(\d+ms|\d+\.\d\ds)\s+(\d+%|-)\s+(\d+|-)$", out, re.M), out
    assert re.search(r"^simple_agent\s.*\s-\s+-$", out, re.M), out


def metrics_limits(text):
    """(server or None, limit name) -> {family: value} for the concurrency families."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(gym_concurrency_\w+)\{(.*)\} (\S+)$", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        key = (labels.get("nemo_gym_server_name"), labels["nemo_gym_concurrency_limit_name"])
        out.setdefault(key, {})[m.group(1)] = float(m.group(3))
    return out


def start_exporter(tmp_path, *args, env=None):
    """(process, port): gym-exporter with `args` on a free port, once it
    listens (its log in tmp_path/exporter.log)."""
    log = tmp_path / "exporter.log"
    ex = subprocess.Popen([EXPORTER, *args, "--web.listen-address=127.0.0.1:0"],
                          stderr=open(log, "w"), env=env)
    for _ in range(3000):  # 30 s: a sanitized exporter starts 1,024 workers
        m = re.search(r"\(port (\d+)\)", log.read_text())
        if m:
            return ex, int(m.group(1))
        if ex.poll() is not None:
            break
        time.sleep(0.01)
    ex.kill()
    ex.wait()
    raise AssertionError(f"the exporter did not listen: {log.read_text()}")


def test_json_validates_and_agrees_with_the_exporters_metrics_and_api(demo, exporter):
    port = exporter
    wait_for_limits(demo)
    before = stat_json(demo)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=HTTP_S).read()
    api = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/snapshot",
                                            timeout=HTTP_S).read())
    after = stat_json(demo)
    jsonschema.validate(api, SCHEMA, cls=jsonschema.Draft202012Validator)
    served = metrics_limits(metrics.decode())
    for doc in (before, after, api):
        assert {(l["server_name"], l["limit_name"]) for l in doc["limits"]} == set(served)
    for l in after["limits"]:
        key = (l["server_name"], l["limit_name"])
        first = next(x for x in before["limits"] if (x["server_name"], x["limit_name"]) == key)
        assert served[key]["gym_concurrency_limit"] == l["limit"]
        # Counters agree within one update: between the two snapshots around the scrape.
        c = served[key]["gym_concurrency_admission_cancelled_total"]
        assert first["admission_cancelled_total"] <= c <= l["admission_cancelled_total"]
        if l["admission_timeouts_total"] is not None:
            c = served[key]["gym_concurrency_admission_timeouts_total"]
            assert first["admission_timeouts_total"] <= c <= l["admission_timeouts_total"]
        # Gauges: the same ranges the demo's semaphores allow.
        assert 0 <= l["active"] <= l["limit"] and l["available"] == l["limit"] - l["active"]
        # Each demo limit is one process's (its forked verifiers inherit it):
        # nothing can be stranded.
        assert l["processes"] == served[key]["gym_concurrency_processes"] == 1
        assert l["stranded_slots"] == served[key]["gym_concurrency_stranded_slots"] == 0
    names = {s["server_name"] for s in after["servers"]}
    assert names == {"rollout_driver", "simple_agent", "policy_model", "math_verifier",
                     "code_sandbox", "llm_judge"}
    assert all(s["rss_bytes"] > 0 and s["processes"] >= 1 for s in after["servers"])
    # The demo's one instrumented event loop (llm_judge): its lag histogram
    # agrees with /metrics within one update, and it has a blocked time.
    for doc in (before, after, api):
        for srv in doc["servers"]:
            loop = srv["server_name"] == "llm_judge"
            assert (srv["event_loop_lag_seconds"] is not None) == loop, srv
            assert (srv["event_loop_blocked_seconds"] is not None) == loop, srv
    judge = {d: next(x for x in doc["servers"] if x["server_name"] == "llm_judge")
             for d, doc in (("before", before), ("after", after))}
    served_lag = re.search(r'^gym_python_event_loop_lag_seconds_count'
                           r'\{nemo_gym_server_name="llm_judge"\} (\S+)$', metrics.decode(), re.M)
    assert served_lag, "the exposition has the judge's lag"
    assert (judge["before"]["event_loop_lag_seconds"]["count"] <= float(served_lag.group(1))
            <= judge["after"]["event_loop_lag_seconds"]["count"])
    assert judge["after"]["event_loop_blocked_seconds"] >= 0


FAKE_NVML = os.path.join(BUILD, "tests", "fake-nvml-current", "libnvidia-ml.so.1")


def test_gpu_memory_per_server_in_gym_stat_and_the_api(lone_demo, tmp_path):
    """With NVML (the tests' fake libnvidia-ml.so.1, answering from a fixture
    with the demo servers' pids), gym-stat --json and the exporter's
    /api/v1/snapshot give each server the GPU memory of its processes; a
    process of no server counts for none. Without NVML (this host) it is
    null."""
    wait_for_limits(lone_demo)
    without = stat_json(lone_demo)
    assert all(s["gpu_memory_bytes"] is None for s in without["servers"])
    pids = {s["server_name"]: s["pid"] for s in without["servers"]}
    fixture = tmp_path / "nvml"
    fixture.write_text(f"device GPU-0 85899345920 10737418240\n"
                       f"process {pids['policy_model']} 4294967296\n"
                       f"process {pids['code_sandbox']} 1073741824\n"
                       f"process {os.getpid()} 2147483648\n")
    env = dict(os.environ, FAKE_NVML_FIXTURE=str(fixture))
    want = {name: 0 for name in pids}
    want.update(policy_model=4294967296, code_sandbox=1073741824)
    out = subprocess.run([STAT, f"--registry.dir={lone_demo}", "--json",
                          f"--gpu-library={FAKE_NVML}"],
                         check=True, capture_output=True, text=True, timeout=30, env=env).stdout
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert {s["server_name"]: s["gpu_memory_bytes"] for s in doc["servers"]} == want
    cfg = tmp_path / "gym.yml"
    cfg.write_text(f"gpu:\n  library: {FAKE_NVML}\n")
    ex, port = start_exporter(tmp_path, f"--config.file={cfg}", f"--registry.dir={lone_demo}",
                              env=env)
    try:
        api = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/snapshot",
                                                timeout=HTTP_S).read())
        assert {s["server_name"]: s["gpu_memory_bytes"] for s in api["servers"]} == want
    finally:
        ex.send_signal(signal.SIGTERM)
        ex.wait(timeout=STOP_S)


def test_it_reads_without_an_exporter_and_removes_nothing(registry):
    subprocess.run([DEMO, f"--registry.dir={registry}", "--duration=1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    files = sorted(os.listdir(registry))
    # Its writers folded their segments into the totals as they exited.
    assert ".exporter-totals" in files and not any(f.startswith("gym-") for f in files), files
    doc = stat_json(registry)
    assert doc["writers"] == [] and doc["limits"] == []  # every writer has exited
    assert any(o["duration_seconds"] for o in doc["operations"]), "their counts are still read"
    assert sorted(os.listdir(registry)) == files


def test_it_links_the_collecting_side_only_not_http_tls_or_zlib():
    # gym-stat runs the exporter's collectors, not its server: no TLS, no
    # compression, no password hashing in its process.
    libs = subprocess.run(["ldd", STAT], capture_output=True, text=True, check=True).stdout
    for lib in ("libssl", "libcrypto", "libz.so", "libcrypt.so"):
        assert lib not in libs, f"gym-stat links {lib}:\n{libs}"
    served = subprocess.run(["ldd", EXPORTER], capture_output=True, text=True, check=True).stdout
    assert "libssl" in served, "the check must see what the exporter links"
