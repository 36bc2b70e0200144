"""The whole loop against the real Prometheus (Debian's package): two Gym
hosts (gym-demo + gym-exporter, separate registries) scraped by one
Prometheus as two instances of one job. Every process the tests start is
stopped by its pid at the end, also on failure."""
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

from pace import HTTP_S, SANITIZED, SHM_PREFIX
from procs import stop_all

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("GYM_BUILD_DIR", os.path.join(SOURCE, "build"))
# A sanitized build (ctest sets GYM_SANITIZE) is 5-20 times slower: two such
# exporters beside two such demos (forking verifiers) and Prometheus on two
# cores answered a scrape in 4-15 s here (ThreadSanitizer), so they are
# scraped every 20 s, with windows and waits to match.
SCRAPE_S = 20 if SANITIZED else 2
SAMPLE_S = 5 if SANITIZED else 1
# How long a query waits for its answer to hold.
QUERY_S = 240 if SANITIZED else 60
RATE_WINDOW = f"{4 * SCRAPE_S if SANITIZED else 15}s"
# Not under ThreadSanitizer: there two exporters, two demos and Prometheus on
# two cores fall behind their scrapes for minutes at a time (a render outlasts
# the 20 s timeout, and the abandoned scrapes are still rendered, one after
# another), so the loop tests the machine's speed, not the code. The plain and
# AddressSanitizer runs keep it; the TSan runs of the OpenMetrics, gym-stat
# and hardening tests scrape the same exporter code with real clients.
pytestmark = pytest.mark.skipif("thread" in os.environ.get("GYM_SANITIZE", ""),
                                reason="too slow under ThreadSanitizer on two cores")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

LIMIT_LABELS = {"nemo_gym_concurrency_component", "nemo_gym_concurrency_limit_name",
                "nemo_gym_server_name"}
OP_LABELS = {"nemo_gym_resources_operation", "nemo_gym_resources_executor", "nemo_gym_server_name"}
SERVER_LABELS = {"nemo_gym_server_name", "nemo_gym_server_type"}
# Family: (type, label names besides job and instance, allowed to be absent).
CONTRACT = {
    "gym_concurrency_limit": ("gauge", LIMIT_LABELS),
    "gym_concurrency_active": ("gauge", LIMIT_LABELS),
    "gym_concurrency_available": ("gauge", LIMIT_LABELS),
    "gym_concurrency_queue_depth": ("gauge", LIMIT_LABELS),
    "gym_concurrency_admission_timeouts_total": ("counter", LIMIT_LABELS),
    "gym_concurrency_admission_cancelled_total": ("counter", LIMIT_LABELS),
    "gym_resources_operation_queue_duration_seconds": (
        "histogram", OP_LABELS | {"le", "nemo_gym_concurrency_wait_outcome"}),
    "gym_resources_operation_duration_seconds": (
        "histogram", OP_LABELS | {"le", "nemo_gym_resources_operation_outcome"}),
    "gym_resources_operation_queued": ("gauge", OP_LABELS),
    "gym_resources_operation_active": ("gauge", OP_LABELS),
    "gym_server_memory_usage_bytes": ("gauge", SERVER_LABELS | {"memory_type"}),
    "gym_server_memory_sampled_peak_bytes": ("gauge", SERVER_LABELS | {"memory_type"}),
    "gym_server_processes": ("gauge", SERVER_LABELS),
    "gym_server_info": ("gauge", SERVER_LABELS | {"process_pid"}),
    "gym_host_memory_usage_bytes": ("gauge", set()),
    "gym_host_memory_available_bytes": ("gauge", set()),
    "gym_host_memory_total_bytes": ("gauge", set()),
    "gym_host_memory_sampled_peak_bytes": ("gauge", set()),
    "gym_exporter_build_info": ("gauge", {"version", "revision"}),
    "gym_exporter_scrape_duration_seconds": ("gauge", set()),
    "gym_exporter_registry_segments": ("gauge", {"format_version"}),
    "gym_exporter_registry_retired_segments_total": ("counter", set()),
    "gym_exporter_registry_dropped_series_total": ("counter", set()),
    "gym_exporter_registry_rejected_segments_total": ("counter", set()),
    "gym_exporter_memory_sample_duration_seconds": ("gauge", set()),
    "gym_exporter_memory_sample_errors_total": ("counter", {"reason"}),
    "process_cpu_seconds_total": ("counter", set()),
    "process_resident_memory_bytes": ("gauge", set()),
    "process_open_fds": ("gauge", set()),
    "process_start_time_seconds": ("gauge", set()),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=HTTP_S) as r:
        return json.loads(r.read())


def make_memory_cgroup(name, limit):
    """A memory cgroup of this host with `limit` bytes (cgroup v2 when the
    unified hierarchy offers the memory controller, else the v1 memory
    hierarchy), or None where the kernel refuses (not root, no controller)."""
    v2 = v1 = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) < 5 or len(rest) < 3:
                continue
            if rest[0] == "cgroup2" and v2 is None:
                v2 = fields[4]
            elif rest[0] == "cgroup" and "memory" in rest[2].split(",") and v1 is None:
                v1 = fields[4]
    try:
        with open(os.path.join(v2, "cgroup.controllers")) as f:
            v2_memory = "memory" in f.read().split()
    except (OSError, TypeError):
        v2_memory = False
    try:
        if v2_memory:
            with open(os.path.join(v2, "cgroup.subtree_control"), "w") as f:
                f.write("+memory")
            path, limit_file = os.path.join(v2, name), "memory.max"
        elif v1:
            path, limit_file = os.path.join(v1, name), "memory.limit_in_bytes"
        else:
            return None
        os.mkdir(path)
        with open(os.path.join(path, limit_file), "w") as f:
            f.write(str(limit))
        return path
    except OSError:
        return None


class Loop:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix=SHM_PREFIX + "loop-", dir="/dev/shm")
        self.procs = []
        self.exporter_ports = []
        self.cgroups = []

    def start(self, *args, **kwargs):
        p = subprocess.Popen(list(args), **kwargs)
        self.procs.append(p)
        return p

    def start_host(self, n):
        registry = os.path.join(self.dir, f"registry-{n}")
        # Each demo host's servers run in a memory cgroup of their own (as
        # a systemd unit's would), so that the cgroup families have series.
        cgroup = make_memory_cgroup(f"gym-loop-{os.getpid()}-{n}", 4 << 30)

        def join():
            if cgroup:
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))

        if cgroup:
            self.cgroups.append(cgroup)
        self.start(f"{BUILD}/demo/gym-demo", f"--registry.dir={registry}",
                   stderr=subprocess.DEVNULL, preexec_fn=join)
        port = free_port()
        cfg = os.path.join(self.dir, f"exporter-{n}.yml")
        with open(cfg, "w") as f:
            f.write(f"memory:\n  interval_seconds: {SAMPLE_S}\n"
                    f"cgroup:\n  interval_seconds: {SAMPLE_S}\n"
                    f"run:\n  name: loop-{n}\n")
        self.start(f"{BUILD}/exporter/gym-exporter", f"--config.file={cfg}",
                   f"--registry.dir={registry}", f"--web.listen-address=127.0.0.1:{port}",
                   stderr=open(os.path.join(self.dir, f"exporter-{n}.log"), "w"))
        self.exporter_ports.append(port)

    def start_prometheus(self):
        self.prom_port = free_port()
        rules = os.path.join(SOURCE, "config", "rules")
        cfg = os.path.join(self.dir, "prometheus.yml")
        targets = ", ".join(f'"127.0.0.1:{p}"' for p in self.exporter_ports)
        with open(cfg, "w") as f:
            # Slow builds (ThreadSanitizer) need more than the 1 s a 1 s
            # interval would leave a scrape.
            f.write(f"global:\n  scrape_interval: {SCRAPE_S}s\n  scrape_timeout: {SCRAPE_S}s\n"
                    f"  evaluation_interval: {SCRAPE_S}s\n"
                    f"rule_files:\n  - {rules}/gym-recording.yml\n  - {rules}/gym-alerts.yml\n"
                    f"scrape_configs:\n  - job_name: gym\n    static_configs:\n"
                    f"      - targets: [{targets}]\n")
        self.start(PROMETHEUS, f"--config.file={cfg}",
                   f"--storage.tsdb.path={os.path.join(self.dir, 'tsdb')}",
                   f"--web.listen-address=127.0.0.1:{self.prom_port}",
                   stderr=open(os.path.join(self.dir, "prometheus.log"), "w"))
        self.api = f"http://127.0.0.1:{self.prom_port}/api/v1"

    def query(self, expr):
        url = f"{self.api}/query?" + urllib.parse.urlencode({"query": expr})
        return get_json(url)

    def query_until(self, expr, accept, seconds=QUERY_S):
        """The query's result once `accept(result)` holds, or the last one after
        `seconds`: a failed scrape (a slow, sanitized build) briefly marks a
        target's series stale, and instant queries then miss them."""
        deadline = time.time() + seconds
        while True:
            r = self.query(expr)
            if r["status"] == "success" and accept(r["data"]["result"]):
                return r
            if time.time() > deadline:
                return r
            time.sleep(0.5)

    def stop(self):
        stop_all(self.procs)
        shutil.rmtree(self.dir, ignore_errors=True)
        for cgroup in self.cgroups:
            for _ in range(100):  # freed once its last process is released
                try:
                    os.rmdir(cgroup)
                    break
                except OSError:
                    time.sleep(0.05)


@pytest.fixture(scope="module")
def loop():
    lp = Loop()
    try:
        lp.start_host(1)
        lp.start_host(2)
        lp.start_prometheus()
        # Each target seen up once: a sanitized exporter's first scrapes (its
        # model built on a loaded machine) can outlast a scrape timeout.
        deadline = time.time() + (180 if SANITIZED else 60)
        up = set()
        while time.time() < deadline and len(up) < 2:
            try:
                targets = get_json(f"{lp.api}/targets")["data"]["activeTargets"]
                up |= {t["scrapeUrl"] for t in targets if t["health"] == "up"}
            except OSError:
                pass
            time.sleep(0.5)
        assert len(up) == 2, f"targets not up: {sorted(up)}"
        # Every server of both demo hosts (5 limits and 5 servers each; slow
        # builds start them at different times), and enough scrapes for rates.
        ready = ('count(gym_concurrency_limit) == 10 and '
                 'count(gym_server_memory_usage_bytes{memory_type="rss"}) == 10 and '
                 'count(gym_server_memory_usage_bytes{memory_type="pss"}) > 0 and '
                 'count(count by (instance) (rate(gym_concurrency_admission_cancelled_total[' + RATE_WINDOW + ']))) == 2')
        wait_until = time.time() + (360 if SANITIZED else 90)
        while time.time() < wait_until and not lp.query(ready)["data"]["result"]:
            time.sleep(1)
        time.sleep(3 * SCRAPE_S if SANITIZED else 6)  # a few more scrapes: every rate has points
        yield lp
    finally:
        lp.stop()


def test_every_family_of_the_contract_arrives_with_its_type(loop):
    # Prometheus asks for OpenMetrics first, and gets it: a counter's family
    # is then named without _total (its samples have it), with its unit.
    meta = get_json(f"{loop.api}/metadata")["data"]
    for family, (kind, _) in CONTRACT.items():
        name = family[:-len("_total")] if kind == "counter" else family
        assert name in meta, f"{name} missing from metadata"
        assert meta[name][0]["type"] == kind, family
    assert meta["gym_resources_operation_duration_seconds"][0]["unit"] == "seconds"
    assert meta["gym_host_memory_total_bytes"][0]["unit"] == "bytes"


def test_every_family_has_the_contract_label_names(loop):
    for family, (kind, labels) in CONTRACT.items():
        name = family + "_bucket" if kind == "histogram" else family
        url = f"{loop.api}/series?" + urllib.parse.urlencode({"match[]": name})
        series = get_json(url)["data"]
        assert series, f"no series of {name}"
        for s in series:
            names = set(s) - {"__name__", "job", "instance"}
            assert names <= labels, (name, names - labels)
            assert s["job"] == "gym"


def test_each_demo_hosts_servers_report_their_own_cgroup(loop):
    if len(loop.cgroups) < 2:
        pytest.skip("no memory cgroup could be made here for the demo hosts")
    limit = 4 << 30
    r = loop.query_until(
        f'count by (instance) (gym_server_cgroup_memory_limit_bytes{{job="gym"}} == {limit})',
        lambda result: len(result) == 2)
    assert len(r["data"]["result"]) == 2, r
    info = loop.query('gym_server_cgroup_info{job="gym"}')["data"]["result"]
    assert {i["metric"]["cgroup"].rsplit("/", 1)[-1] for i in info} == {
        os.path.basename(c) for c in loop.cgroups}
    usage = loop.query('gym_server_cgroup_memory_usage_bytes{job="gym"}')["data"]["result"]
    assert usage and all(0 < float(u["value"][1]) < limit for u in usage)


def dashboard_queries():
    for path in sorted(glob.glob(os.path.join(SOURCE, "dashboards", "*.json"))):
        with open(path) as f:
            d = json.load(f)
        for p in d["panels"]:
            for t in p["targets"]:
                yield f"{d['uid']}: {p['title']}", t["expr"]


@pytest.mark.parametrize("title,expr", list(dashboard_queries()))
def test_every_dashboard_query_evaluates_and_returns_data(loop, title, expr):
    if "gym_server_cgroup_" in expr and len(loop.cgroups) < 2:
        pytest.skip("no memory cgroup could be made here for the demo hosts")
    if re.search(r"gym_(server_)?gpu_", expr):
        pytest.skip("the demo hosts have no GPU (tests/exporter/gpu_test.cc serves these "
                    "families through a fake NVML)")
    if "gym_server_cgroup_" in expr and "_pressure_seconds_total" in expr:
        pytest.skip("pressure of a server's cgroups is cgroup v2's; the demo hosts' cgroups are "
                    "v1 here (tests/exporter/cgroup_test.cc serves these from fixtures)")
    if "gym_server_cgroup_cpu_" in expr:
        pytest.skip("the demo hosts' servers run in no cpu cgroup with a quota "
                    "(tests/exporter/cgroup_test.cc serves these from a real one and fixtures)")
    filled = (expr.replace("$job", "gym").replace("$instance", ".*")
              .replace("$__rate_interval", RATE_WINDOW))
    filled = re.sub(r"\$(component|limit|server|operation)\b", ".*", filled)  # All
    r = loop.query_until(filled, lambda result: bool(result))
    assert r["status"] == "success", (title, r)
    assert r["data"]["result"], f"{title}: no data for {filled}"


def test_dashboard_pictures_render_every_panel_from_the_real_data(loop, tmp_path):
    sys.path.insert(0, os.path.join(SOURCE, "dashboards"))
    import render  # dashboards/render.py, as the README's pictures are made
    end = time.time()
    found = render.render(loop.api, end - max(60, 3 * SCRAPE_S), end, str(tmp_path),
                          rate_interval=RATE_WINDOW)
    assert sorted(os.path.basename(f) for f in found) == [
        "gym-concurrency.png", "gym-memory.png", "gym-resources-operations.png"]
    for path, counts in found.items():
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", path
        if len(loop.cgroups) < 2:
            counts.pop("Servers' cgroups", None)
        for gpu_panel in ("GPU memory by server, per GPU", "GPU utilization by server, per GPU",
                          "GPUs: used, unattributed, total"):
            counts.pop(gpu_panel, None)  # no GPU on the demo hosts
        counts.pop("Throttled share of CPU periods per server", None)  # no CPU quota there
        counts.pop("Pressure stalls per server", None)  # cgroup v2 only
        if len(loop.cgroups) < 2:
            counts.pop("OOM kills in servers' cgroups, by kind", None)
        assert all(counts.values()), f"{path}: panels without data: {counts}"


def dashboard_variables():
    for path in sorted(glob.glob(os.path.join(SOURCE, "dashboards", "*.json"))):
        with open(path) as f:
            d = json.load(f)
        for v in d["templating"]["list"]:
            if v["type"] == "query" and v["name"] not in ("job", "instance"):
                yield f"{d['uid']}: ${v['name']}", v["query"]["query"]


@pytest.mark.parametrize("name,query", list(dashboard_variables()))
def test_every_dashboard_variable_lists_values(loop, name, query):
    m = re.fullmatch(r"label_values\((.+), (\w+)\)", query)
    assert m, query
    selector = m.group(1).replace("$job", "gym").replace("$instance", ".*")
    url = (f"{loop.api}/label/{m.group(2)}/values?"
           + urllib.parse.urlencode({"match[]": selector}))
    assert get_json(url)["data"], f"{name}: no values for {query}"


def test_the_run_variable_picks_its_exporters_instance_and_all_picks_both(loop):
    d = json.load(open(os.path.join(SOURCE, "dashboards", "gym-memory.json")))
    query = next(v for v in d["templating"]["list"] if v["name"] == "instance")["query"]["query"]
    m = re.fullmatch(r"label_values\((.+), instance\)", query)
    assert m, query

    def instances(run):
        selector = m.group(1).replace("$job", "gym").replace("$run", run)
        url = f"{loop.api}/label/instance/values?" + urllib.parse.urlencode({"match[]": selector})
        return get_json(url)["data"]

    ports = [f"127.0.0.1:{p}" for p in loop.exporter_ports]
    assert instances("loop-1") == [ports[0]]  # hosts 1 and 2, started in that order
    assert sorted(instances(".*")) == sorted(ports)


def test_dashboard_queries_aggregate_across_the_two_instances(loop):
    def equals(n):
        return lambda result: bool(result) and float(result[0]["value"][1]) == n

    instances = loop.query_until(
        'count(count by (instance) (gym_exporter_build_info{job=~"gym"}))', equals(2))
    assert float(instances["data"]["result"][0]["value"][1]) == 2
    # Each demo host has a rollouts limit of 16: the dashboard's sum is both.
    r = loop.query_until(
        'sum by (nemo_gym_concurrency_component, nemo_gym_concurrency_limit_name, '
        'nemo_gym_server_name) (gym_concurrency_limit{job=~"gym", instance=~".*", '
        'nemo_gym_concurrency_limit_name="rollouts"})', equals(32))
    assert float(r["data"]["result"][0]["value"][1]) == 32
    one = loop.query_until('sum(gym_concurrency_limit{job=~"gym", instance=~"127.0.0.1:'
                           f'{loop.exporter_ports[0]}", nemo_gym_concurrency_limit_name="rollouts"}})',
                           equals(16))
    assert float(one["data"]["result"][0]["value"][1]) == 16


def test_recording_rules_evaluate_over_real_data(loop):
    deadline = time.time() + (3 * SCRAPE_S if SANITIZED else 20)
    while time.time() < deadline:
        r = loop.query("gym:concurrency_saturation:ratio")
        if r["data"]["result"]:
            break
        time.sleep(1)
    assert r["data"]["result"]
    for s in r["data"]["result"]:
        assert 0 <= float(s["value"][1]) <= 1


def test_promtool_accepts_the_exposition(loop):
    body = urllib.request.urlopen(f"http://127.0.0.1:{loop.exporter_ports[0]}/metrics").read()
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout + r.stderr == b""


def test_promtool_checks_and_tests_the_rules():
    rules = os.path.join(SOURCE, "config", "rules")
    # Every file in the rules directory is a rule file (its tests live in tests/rules/).
    files = sorted(glob.glob(f"{rules}/*.yml"))
    assert len(files) >= 2, files
    r = subprocess.run([PROMTOOL, "check", "rules", *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    tests = os.path.join(SOURCE, "tests", "rules")
    r = subprocess.run([PROMTOOL, "test", "rules", *sorted(glob.glob(f"{tests}/*.test.yml"))],
                       capture_output=True, text=True, cwd=tests)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([PROMTOOL, "check", "config", os.path.join(SOURCE, "config",
                                                                  "prometheus.yml")],
                       capture_output=True, text=True, cwd=os.path.join(SOURCE, "config"))
    assert r.returncode == 0, r.stdout + r.stderr
