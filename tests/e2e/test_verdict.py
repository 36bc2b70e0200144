"""The verdict (docs/verdict.md) as a user meets it: on gym-demo, gym-stat's
first line, the exporter's /api/v1/snapshot and the mixin's recording rules
in a real Prometheus name the same bottleneck, and every Little's-law check
of the exporter's windows holds over several windows; a real asyncio loop
blocked in a callback is the first entry of gym-stat's verdict."""
import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
import urllib.parse
import urllib.request

import jsonschema
import pytest
import yaml

from pace import HTTP_S, SANITIZED, SHM_PREFIX, STOP_S
from procs import Procs, until
from test_fleet import PROMETHEUS, free_port, get_json
from test_gym_stat import DEMO, EXPORTER, SCHEMA, STAT

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("GYM_BUILD_DIR", os.path.join(SOURCE, "build"))
# The exporter's and gym-stat's windows, and the mixin's (Prometheus scrapes
# and evaluates every second here). A sanitized build reads more slowly.
WINDOW_S = 30 if SANITIZED else 10
WINDOWS = 3
# The mixin's: at least six scrapes (a sanitized exporter is scraped every
# 10 s), so that a mean is not one or two samples'.
RULES_WINDOW_S = 60 if SANITIZED else 10
WAIT_S = 600 if SANITIZED else 120


@pytest.fixture
def procs(tmp_path):
    p = Procs(tmp_path)
    yield p
    p.stop()


def subject(labels):
    """An entry's subject from a gym:verdict:score series, as the exporter names it."""
    server = labels.get("nemo_gym_server_name") or "-"
    if labels["place"] == "limit":
        return (f"{server}/{labels['nemo_gym_concurrency_component']}/"
                f"{labels['nemo_gym_concurrency_limit_name']}")
    if labels["place"] == "operation":
        return (f"{server}/{labels['nemo_gym_resources_operation']}/"
                f"{labels['nemo_gym_resources_executor']}")
    return server


def snapshot(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/snapshot", timeout=HTTP_S) as r:
        doc = json.loads(r.read())
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    return doc


def rules_file(tmp_path):
    """The mixin's recording rules with the test's window."""
    out = subprocess.run(
        ["jsonnet", "-J", os.path.join(SOURCE, "mixin"), "-e",
         f"((import 'mixin.libsonnet') + {{_config+:: {{verdictWindow: '{RULES_WINDOW_S}s', "
         "gymSelector: 'job=\"gym\"'}}).prometheusRules"],
        check=True, capture_output=True, text=True).stdout
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(json.loads(out)))
    return path


def start_prometheus(procs, tmp_path, exporter_port):
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    scrape = 10 if SANITIZED else 1
    cfg.write_text(textwrap.dedent(f"""\
        global:
          scrape_interval: {scrape}s
          scrape_timeout: {scrape}s
          evaluation_interval: 1s
        rule_files: ['{rules_file(tmp_path)}']
        scrape_configs:
          - job_name: gym
            static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]
        """))
    procs.start(PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path}/tsdb",
                f"--web.listen-address=127.0.0.1:{port}",
                stderr=open(tmp_path / "prometheus.log", "w"))
    return f"http://127.0.0.1:{port}/api/v1"


def ranked_by_prometheus(api):
    q = urllib.parse.quote("sort_desc(gym:verdict:score)")
    try:
        result = get_json(f"{api}/query?query={q}")["data"]["result"]
    except OSError:
        return []
    return [(subject(r["metric"]), r["metric"]["cause"], float(r["value"][1])) for r in result]


def stat_headlines(registry, seconds):
    """gym-stat's first lines over `seconds` (a frame a second)."""
    p = subprocess.Popen([STAT, f"--registry.dir={registry}", "--interval=1",
                          f"--window={WINDOW_S}"], stdout=subprocess.PIPE, text=True)
    lines, end = [], time.monotonic() + seconds
    try:
        for line in p.stdout:
            if line.startswith(("bottleneck:", "no bottleneck")):
                lines.append(line.strip())
            if time.monotonic() > end:
                break
    finally:
        p.kill()
        p.wait()
    return lines


def test_gym_stat_the_api_and_the_mixin_name_the_same_bottleneck_and_the_law_holds(
        procs, tmp_path):
    registry = tempfile.mkdtemp(prefix=SHM_PREFIX + "verdict-", dir="/dev/shm")
    try:
        procs.start(DEMO, f"--registry.dir={registry}", "--duration=900",
                    stderr=subprocess.DEVNULL)
        config = tmp_path / "exporter.yml"
        config.write_text(f"verdict:\n  window_seconds: {WINDOW_S}\n")
        port = free_port()
        procs.start(EXPORTER, f"--config.file={config}", f"--registry.dir={registry}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    stderr=open(tmp_path / "exporter.log", "w"))
        api = start_prometheus(procs, tmp_path, port)
        verdicts = exporter_windows(port)
        for v in verdicts.values():
            drifts = [c for c in v["littles_law"] if not c["holds"]]
            assert drifts == [], drifts
            assert len(v["littles_law"]) >= 10, v["littles_law"]
        first = {(v["entries"][0]["subject"], v["entries"][0]["cause"])
                 for v in verdicts.values()}
        assert first == {(MATH, "limit_too_small")}, verdicts
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=HTTP_S) as r:
            page = r.read().decode()
        assert f"<b>bottleneck: limit {MATH}: limit too small" in page, page
        ranked = until("the mixin's verdict in Prometheus", lambda: ranked_by_prometheus(api),
                       WAIT_S, pause=1)
        assert ranked[0][:2] == (MATH, "limit_too_small"), ranked
        headlines = stat_headlines(registry, WINDOW_S + 5)
        assert headlines[-1].startswith(f"bottleneck: limit {MATH}: limit too small"), headlines
    finally:
        procs.stop()
        shutil.rmtree(registry, ignore_errors=True)


MATH = "math_verifier/resources_server/verifiers"


def exporter_windows(port):
    """The exporter's verdicts of WINDOWS whole windows, by their end."""
    verdicts = {}

    def windows():
        try:
            v = snapshot(port)["verdict"]
        except OSError:
            return False  # not up yet
        if v and v["window_end_seconds"] - v["window_start_seconds"] >= WINDOW_S:
            verdicts[v["window_end_seconds"]] = v
        return len(verdicts) >= WINDOWS
    until(f"{WINDOWS} windows of the exporter's verdict", windows, WAIT_S * 2, pause=1)
    return verdicts


BLOCKER = """
import asyncio, sys, time
import gym_metrics
gym_metrics.declare_server("blocky", "agent_server")
async def main():
    gym_metrics.instrument_runtime(interval_s=0.1, grace_s=0.05)
    await asyncio.sleep(0.5)
    print("beating", flush=True)
    await asyncio.sleep(0.1)
    time.sleep(30)  # a callback that blocks the loop
asyncio.run(main())
"""


def test_a_blocked_asyncio_loop_is_the_first_entry(procs, tmp_path):
    if not os.path.isdir(os.path.join(BUILD, "python", "gym_metrics")):
        pytest.skip("no Python extension in this build (a sanitized one)")
    registry = tempfile.mkdtemp(prefix=SHM_PREFIX + "blocked-", dir="/dev/shm")
    env = dict(os.environ, GYM_METRICS_DIR=registry, PYTHONPATH=os.path.join(BUILD, "python"))
    p = subprocess.Popen(["/usr/bin/python3", "-c", BLOCKER], env=env, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "beating"
        def blocked():
            out = subprocess.run([STAT, f"--registry.dir={registry}", "--json"], check=True,
                                 capture_output=True, text=True, timeout=30).stdout
            entries = json.loads(out)["verdict"]["entries"]
            return entries if entries and entries[0]["cause"] == "blocked_event_loop" else None
        entries = until("the loop's verdict", blocked, 20)
        assert entries[0]["subject"] == "blocky", entries
        assert entries[0]["evidence"]["event_loop_blocked_seconds"] >= 1
    finally:
        p.kill()
        p.wait(timeout=STOP_S)
        shutil.rmtree(registry, ignore_errors=True)
