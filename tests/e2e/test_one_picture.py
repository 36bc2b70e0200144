"""One picture of a server: /metrics, /api/v1/snapshot and gym-stat --json
give every server the same RSS, process count and GPU memory, because they
read the same samples (the collectors' last ones, on the board).

Real processes: gym-demo (whose resources servers fork verifier children
that come and go while the test runs), a writer in a pid namespace of its own
(unshare --pid --fork --mount-proc), and the tests' fake NVML answering from
a fixture with the servers' pids. The exporter samples every 0.4 s, so that
samples land between requests; a scrape is compared with the snapshot after
it whenever the snapshot before it says the same samples."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.request

import pytest

from pace import HTTP_S, SANITIZED, STOP_S
from test_gym_stat import (BUILD, DEMO, EXPORTER, FAKE_NVML, STAT, lone_demo,  # noqa: F401
                           registry, start_exporter)

DECLARE = os.path.join(BUILD, "tests", "gym_declare_server")
# Sanitized requests take seconds: samples far apart, so that pairs without
# one between them come at all (with the cpu and cgroup collectors left at
# 5 s and the rest at 3 s, 6 pairs of 50 did in a TSan CI run).
INTERVAL = 12.0 if SANITIZED else 0.4
COMPARED = 10  # pairs with no sample between them that the test compares
PAIRS = 400 if SANITIZED else 100  # at most, whatever samples land between
RUN_S = 180 if SANITIZED else 30  # one gym-stat or gym-exporter --once


def unshare_works():
    return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                          capture_output=True).returncode == 0


def server_numbers(text):
    """server -> {rss, processes, gpu} from an exposition (gpu: summed over
    the GPUs, 0 for a server none of whose processes is on one)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(gym_server_\w+)\{nemo_gym_server_name="([^"]*)",[^}]*?\} (\S+)$', line)
        if not m:
            continue
        family, name, value = m.group(1), m.group(2), float(m.group(3))
        s = out.setdefault(name, {"gpu": 0})
        if family == "gym_server_memory_usage_bytes" and 'memory_type="rss"' in line:
            s["rss"] = value
        elif family == "gym_server_processes":
            s["processes"] = value
        elif family == "gym_server_gpu_memory_bytes":
            s["gpu"] += value
    return out


def snapshot_numbers(doc):
    return {s["server_name"]: {"rss": s["rss_bytes"], "processes": s["processes"],
                               "gpu": s["gpu_memory_bytes"]} for s in doc["servers"]}


def get(port, path):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=HTTP_S).read()


def sandbox_in(registry):
    """A declarer of its own pid namespace writing into the demo's registry."""
    if not unshare_works():
        pytest.skip("unshare --pid --fork --mount-proc does not work here")
    # --kill-child: the writer dies with unshare (a SIGKILL of unshare alone
    # left it running, in its namespace, after the test).
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", DECLARE,
                          "sandboxed", "resources_server", "16", "0"], stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ, GYM_METRICS_DIR=registry))
    assert p.stdout.readline() == "ready 1\n"
    yield registry
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=STOP_S)


@pytest.fixture
def sandboxed(lone_demo):
    """The demo and a namespaced declarer, with no exporter beside (the tests run theirs)."""
    yield from sandbox_in(lone_demo)


def nvml_fixture(tmp_path, doc):
    """The fake NVML's fixture: two servers' oldest processes hold GPU memory."""
    pids = {s["server_name"]: s["pid"] for s in doc["servers"]}
    fixture = tmp_path / "nvml"
    fixture.write_text("device GPU-0 85899345920 10737418240\n"
                       f"process {pids['policy_model']} 4294967296\n"
                       f"process {pids['sandboxed']} 1073741824\n")
    return fixture


def wait_for_servers(port, names):
    for _ in range(200):
        doc = json.loads(get(port, "/api/v1/snapshot"))
        have = {s["server_name"] for s in doc["servers"] if s["rss_bytes"] is not None}
        if names <= have and {"servers", "memory", "gpu"} <= set(doc["samples"]):
            return doc
        time.sleep(0.05)
    raise AssertionError(f"servers {names} not sampled: {doc['servers']}")


def test_metrics_and_the_snapshot_serve_the_same_sample_of_every_server(sandboxed, tmp_path):
    names = {"rollout_driver", "simple_agent", "policy_model", "math_verifier", "code_sandbox",
             "llm_judge", "sandboxed"}
    cfg = tmp_path / "gym.yml"
    # Every collector on the board (the snapshot's "samples") on one period:
    # one left at its 5 s default lands between most sanitized pairs.
    cfg.write_text("".join(f"{c}:\n  interval_seconds: {INTERVAL}\n"
                           for c in ("servers", "memory", "cpu", "cgroup")) +
                   f"gpu:\n  interval_seconds: {INTERVAL}\n  library: {FAKE_NVML}\n")
    # The fixture needs the pids the exporter sees: read them without NVML first.
    plain = json.loads(subprocess.run([STAT, f"--registry.dir={sandboxed}", "--json"], check=True,
                                      capture_output=True, text=True, timeout=RUN_S).stdout)
    env = dict(os.environ, FAKE_NVML_FIXTURE=str(nvml_fixture(tmp_path, plain)))
    ex, port = start_exporter(tmp_path, f"--config.file={cfg}", f"--registry.dir={sandboxed}",
                              env=env)
    try:
        before = wait_for_servers(port, names)
        compared = changed = 0
        seen_processes = {}
        for _ in range(PAIRS):
            if compared >= COMPARED:
                break
            metrics = server_numbers(get(port, "/metrics").decode())
            after = json.loads(get(port, "/api/v1/snapshot"))
            if after["samples"] != before["samples"]:
                changed += 1  # a sample landed between: nothing to compare
            else:
                compared += 1
                for name, want in snapshot_numbers(after).items():
                    if want["rss"] is None:
                        continue  # declared since the last sample: no numbers anywhere
                    assert metrics.get(name) == want, (name, metrics.get(name), want)
                    seen_processes.setdefault(name, set()).add(want["processes"])
            before = after
        assert compared >= COMPARED, f"only {compared} of {PAIRS} pairs without a sample between"
        got = snapshot_numbers(before)
        assert names <= set(got)
        assert got["policy_model"]["gpu"] == 4294967296 and got["sandboxed"]["gpu"] == 1073741824
        assert got["rollout_driver"]["gpu"] == 0, "NVML read: a server with no GPU process has 0"
        assert got["sandboxed"]["processes"] == 1
    finally:
        ex.send_signal(signal.SIGTERM)
        ex.wait(timeout=STOP_S)


def once_numbers(registry, env, cfg):
    out = subprocess.run([EXPORTER, "--once", f"--registry.dir={registry}",
                          f"--config.file={cfg}"], check=True, capture_output=True, text=True,
                         timeout=RUN_S, env=env).stdout
    return server_numbers(out)


# Under ThreadSanitizer each `gym-exporter --once` here maps every segment
# the demo's exited verifiers left (a dozen a second; about 2,500 shadow page
# faults each): one --once took over 180 s on two cores. What it checks is
# gym-stat's numbers against the exporter's (the plain and AddressSanitizer
# runs); the threads of both are ThreadSanitizer's in the other tests here.
@pytest.mark.skipif("thread" in os.environ.get("GYM_SANITIZE", ""),
                    reason="a --once over the demo's pile of segments is too slow under TSan")
def test_gym_stat_computes_a_server_as_the_exporter_does(sandboxed, tmp_path):
    """gym-stat runs the exporter's servers unit and collectors in-process:
    for a server whose numbers two exporter samples around it agree on
    (gym-exporter --once before and after), gym-stat --json gives the same."""
    cfg = tmp_path / "gym.yml"
    cfg.write_text(f"gpu:\n  library: {FAKE_NVML}\n")
    plain = json.loads(subprocess.run([STAT, f"--registry.dir={sandboxed}", "--json"],
                                      check=True, capture_output=True, text=True,
                                      timeout=RUN_S).stdout)
    env = dict(os.environ, FAKE_NVML_FIXTURE=str(nvml_fixture(tmp_path, plain)))
    # The two servers on the GPU, and one other (any: which servers hold
    # still between two sanitized runs is up to the demo) with its 0.
    agreed = set()
    want = {"policy_model", "sandboxed"}

    def enough():
        return want <= agreed and len(agreed) > len(want)

    for _ in range(8):
        if enough():
            break
        first = once_numbers(sandboxed, env, cfg)
        doc = json.loads(subprocess.run([STAT, f"--registry.dir={sandboxed}", "--json",
                                         f"--config.file={cfg}"], check=True, capture_output=True,
                                        text=True, timeout=RUN_S, env=env).stdout)
        last = once_numbers(sandboxed, env, cfg)
        for name, mine in snapshot_numbers(doc).items():
            if name in first and first[name] == last.get(name):
                assert mine == first[name], (name, mine, first[name])
                agreed.add(name)
    assert enough(), agreed


def rollup_opens(registry, cfg):
    """How often gym-stat opened each smaps_rollup over two refreshes 0.5 s apart."""
    trace = cfg.parent / "trace"
    # LeakSanitizer cannot run under ptrace (an AddressSanitizer build).
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat", "-o", str(trace), STAT,
                    f"--registry.dir={registry}", "--once", "--interval=0.5",
                    f"--config.file={cfg}"], check=True, capture_output=True, timeout=RUN_S,
                   env=env)
    opens = {}
    for path in re.findall(r'openat\([^"]*"(/proc/\d+/smaps_rollup)"', trace.read_text()):
        opens[path] = opens.get(path, 0) + 1
    return opens


def test_gym_stat_samples_memory_on_its_interval_not_at_every_refresh(lone_demo, tmp_path):
    """Reading PSS costs the servers (docs/memory.md): gym-stat, which
    refreshes every second, samples memory every memory.interval_seconds, as
    the exporter does."""
    slow, fast = tmp_path / "slow.yml", tmp_path / "fast.yml"
    slow.write_text("memory:\n  interval_seconds: 60\n")
    # The stall budget's shares lifted: a process's PSS may be read again
    # 0.5 s later, and the samples' reads take what they take.
    fast.write_text("memory:\n  interval_seconds: 0.1\n  pss_max_stall_fraction: 1\n"
                    "  pss_max_cpu_fraction: 1\n")
    once = rollup_opens(lone_demo, slow)
    assert once and max(once.values()) == 1, once
    twice = rollup_opens(lone_demo, fast)
    assert max(twice.values()) == 2, twice
