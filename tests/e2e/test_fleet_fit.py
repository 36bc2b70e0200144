"""What the fleets that run Gym expect of an exporter, with real clients:
zstd replies that curl and Python's zstandard decode to the exposition a
plain scrape gets, while gym-demo's writers change; Unix-socket listeners
(curl --unix-socket), a live one refused and a stale one replaced, basic
auth on every listener;
systemd socket activation (systemd-socket-activate); gym_run_info; and a
final capture at SIGTERM that promtool backfills into blocks whose counters
are the last scrape's."""
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
import warnings

import pytest
import zstandard
from prometheus_client.parser import text_string_to_metric_families

from pace import HTTP_S, SANITIZED, STOP_S
from procs import Procs as BaseProcs
from procs import until as procs_until

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("GYM_BUILD_DIR", os.path.join(SOURCE, "build"))
EXPORTER = os.path.join(BUILD, "exporter", "gym-exporter")
DEMO = os.path.join(BUILD, "demo", "gym-demo")
WAIT_S = 120 if SANITIZED else 30


def until(what, check, seconds=WAIT_S):
    return procs_until(what, check, seconds, pause=0.1)


class Procs(BaseProcs):
    def start(self, *argv, log="exporter.log", env=None):
        return super().start(*argv, stderr=open(self.tmp / log, "w"), env=env)


@pytest.fixture
def procs(tmp_path):
    p = Procs(tmp_path)
    yield p
    p.stop()


def port_of(log):
    m = re.search(r"\(port (\d+)\)", log.read_text())
    return int(m.group(1)) if m and m.group(1) != "0" else None


def curl(*args):
    return subprocess.run(["curl", "-sS", "--max-time", str(HTTP_S), *args],
                          capture_output=True, timeout=HTTP_S + 5)


def raw_get(port, accept_encoding=None):
    """(headers, body) of one HTTP/1.0 GET /metrics, the body as sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=HTTP_S) as s:
        extra = f"Accept-Encoding: {accept_encoding}\r\n" if accept_encoding else ""
        s.sendall(f"GET /metrics HTTP/1.0\r\n{extra}\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in head.decode().split("\r\n")[1:])}
    return headers, body


def steady(text):
    """The exposition without the samples that move by themselves once the
    writers stop: the exporter's own and the host's."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith(("gym_exporter_", "process_", "gym_host_")))


def test_zstd_replies_decode_to_the_plain_exposition_across_scrapes_while_writers_change(
        procs, tmp_path):
    reg = tmp_path / "registry"
    demo = procs.start(DEMO, f"--registry.dir={reg}", "--duration=8", log="demo.log")
    procs.start(EXPORTER, f"--registry.dir={reg}", "--web.listen-address=127.0.0.1:0")
    port = until("the exporter listens", lambda: port_of(tmp_path / "exporter.log"))
    until("the demo's limits are served",
          lambda: b"gym_concurrency_limit{" in raw_get(port)[1])
    decoder = zstandard.ZstdDecompressor()

    def unzstd(packed):
        # A streamed frame does not say its size first: read as a stream.
        return decoder.decompressobj().decompress(packed).decode()

    scrapes = 0
    while demo.poll() is None or scrapes < 20:  # the writers change meanwhile
        headers, packed = raw_get(port, "zstd, gzip")  # Prometheus 3.15's zstd-scrape
        assert headers["content-encoding"] == "zstd", headers
        text = unzstd(packed)
        families = list(text_string_to_metric_families(text))  # whole and well formed
        assert len(families) > 30 and text.endswith("\n"), text[-200:]
        scrapes += 1
    # The writers gone, once a sample has seen it (every 5 s): the same
    # exposition plain and through zstd.
    deadline = time.time() + WAIT_S
    while True:
        plain = steady(raw_get(port)[1].decode())
        packed = steady(unzstd(raw_get(port, "zstd")[1]))
        if packed == plain or time.time() > deadline:
            break
        time.sleep(1)
    assert packed == plain
    assert "nemo_gym_concurrency_limit_name=" in plain, "the writers' counters stay"
    # curl (Debian's is built with zstd) asks for every coding it has and
    # gets zstd, which it decodes.
    out = curl("--compressed", "-D", "-", f"http://127.0.0.1:{port}/metrics")
    assert out.returncode == 0, out.stderr
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    assert b"Content-Encoding: zstd" in head, head
    assert steady(body.decode()) == plain


def test_a_unix_socket_answers_curl_a_live_one_is_refused_and_a_stale_one_replaced(
        procs, tmp_path):
    sock = tmp_path / "metrics.sock"
    cfg = tmp_path / "gym.yml"
    cfg.write_text(f"web:\n  listen_address: ['unix:{sock}', '127.0.0.1:0']\n"
                   "  unix_socket_mode: '0600'\n")
    first = procs.start(EXPORTER, f"--config.file={cfg}", f"--registry.dir={tmp_path}/r")
    until("it listens", lambda: port_of(tmp_path / "exporter.log"))
    assert stat.S_ISSOCK(os.stat(sock).st_mode)
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    out = curl("--unix-socket", str(sock), "http://localhost/metrics")
    assert out.returncode == 0 and b"gym_exporter_build_info{" in out.stdout, out.stderr
    # A second exporter on the same path: refused, clearly, at start.
    second = subprocess.run([EXPORTER, f"--registry.dir={tmp_path}/r2",
                             f"--web.listen-address=unix:{sock}"],
                            capture_output=True, text=True, timeout=WAIT_S)
    assert second.returncode != 0
    assert f"cannot listen on unix:{sock}: a live socket is there" in second.stderr
    # A clean stop removes it; one killed leaves a stale socket that the
    # next exporter replaces.
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=STOP_S)
    assert not sock.exists()
    killed = procs.start(EXPORTER, f"--registry.dir={tmp_path}/r",
                         f"--web.listen-address=unix:{sock}", "--web.listen-address=127.0.0.1:0",
                         log="killed.log")
    until("it listens", lambda: port_of(tmp_path / "killed.log"))
    assert f"listening on unix:{sock} 127.0.0.1:0 (port" in (tmp_path / "killed.log").read_text()
    until("it serves", lambda: curl("--unix-socket", str(sock), "http://x/-/ready").returncode == 0)
    killed.kill()
    killed.wait()
    assert sock.exists()
    procs.start(EXPORTER, f"--registry.dir={tmp_path}/r", f"--web.listen-address=unix:{sock}",
                log="next.log")
    until("the next one serves the stale path",
          lambda: curl("--unix-socket", str(sock), "http://x/-/ready").stdout == b"OK\n")


def test_basic_auth_guards_every_listener_the_unix_socket_too(procs, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    hashed = crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    sock = tmp_path / "metrics.sock"
    procs.start(EXPORTER, f"--registry.dir={tmp_path}/r", f"--web.config.file={web}",
                f"--web.listen-address=unix:{sock}", "--web.listen-address=127.0.0.1:0")
    port = until("it listens", lambda: port_of(tmp_path / "exporter.log"))
    for where in (["--unix-socket", str(sock), "http://x/metrics"],
                  [f"http://127.0.0.1:{port}/metrics"]):
        refused = curl("-o", "/dev/null", "-w", "%{http_code}", *where)
        assert refused.stdout == b"401", where
        served = curl("-u", "prometheus:s3cret", *where)
        assert b"gym_exporter_build_info{" in served.stdout, where


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_systemd_socket_activation_serves_the_passed_socket_and_without_one_is_an_error(
        procs, tmp_path):
    port = free_port()
    procs.start("systemd-socket-activate", "-l", f"127.0.0.1:{port}", EXPORTER,
                "--web.systemd-socket", f"--registry.dir={tmp_path}/r",
                "--web.listen-address=127.0.0.1:1")  # ignored: the passed socket wins
    # The socket is systemd-socket-activate's from the start: the first
    # connection starts the exporter, which answers it.
    out = until("it answers on the passed socket",
                lambda: (r := curl(f"http://127.0.0.1:{port}/metrics")).returncode == 0 and r)
    assert b"gym_exporter_build_info{" in out.stdout
    assert "listening on systemd:3" in (tmp_path / "exporter.log").read_text()
    alone = subprocess.run([EXPORTER, "--web.systemd-socket", f"--registry.dir={tmp_path}/r2"],
                           capture_output=True, text=True, timeout=WAIT_S)
    assert alone.returncode != 0
    assert "systemd passed no socket" in alone.stderr


def test_run_identity_is_one_info_series_from_the_configuration_and_the_environment(tmp_path):
    cfg = tmp_path / "gym.yml"
    cfg.write_text("run:\n  name: math-rl-7\n")
    env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3",
           "RAY_CLUSTER_NAME": "raycluster-gym", "GYM_RUN": "overridden"}
    out = subprocess.run([EXPORTER, "--once", f"--config.file={cfg}",
                          f"--registry.dir={tmp_path}/r"],
                         capture_output=True, text=True, env=env, timeout=WAIT_S)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("gym_run_info")]
    assert lines == ['gym_run_info{run="math-rl-7",slurm_job_id="4242",slurm_step_id="3",'
                     'ray_cluster="raycluster-gym"} 1'], lines
    assert "slurm_job_id" not in out.stdout.replace(lines[0], ""), "only on gym_run_info"


def counters(text):
    """{(name, labels): value} of a text exposition's counter samples, but
    the host's and the exporter's own (gym_exporter_*, process_*), which go
    on counting after the writers stop."""
    out = {}
    own = ("gym_exporter_", "gym_host_", "process_")
    for family in text_string_to_metric_families(text):
        if family.type != "counter" or family.name.startswith(own):
            continue
        for s in family.samples:
            if s.name.endswith("_total"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def dumped(blocks):
    """{(name, labels): last value} of every series promtool dumps."""
    (blocks / "wal").mkdir(exist_ok=True)  # promtool 2.42 reads one, empty here
    out = subprocess.run(["promtool", "tsdb", "dump", str(blocks)], capture_output=True,
                         text=True, timeout=WAIT_S, check=True).stdout
    got = {}
    for line in out.splitlines():
        m = re.match(r"\{(.*)\} (\S+) \d+$", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))
        name = labels.pop("__name__")
        got[(name, tuple(sorted(labels.items())))] = float(m.group(2))
    return got


def test_a_final_capture_at_sigterm_backfills_into_blocks_with_the_last_scrapes_counters(
        procs, tmp_path):
    reg = tmp_path / "registry"
    demo = procs.start(DEMO, f"--registry.dir={reg}", "--duration=3", log="demo.log")
    exporter = procs.start(EXPORTER, f"--registry.dir={reg}", "--web.listen-address=127.0.0.1:0",
                           f"--web.final-capture={tmp_path}/final")
    port = until("the exporter listens", lambda: port_of(tmp_path / "exporter.log"))
    demo.wait(timeout=WAIT_S)  # its writers gone: their counts are final
    # Once the exporter's samples (every 5 s) have seen the servers go too,
    # two scrapes a sample apart agree: the last scrape.
    last = raw_get(port)[1].decode()
    deadline = time.time() + WAIT_S
    while True:
        time.sleep(5.5)
        now = raw_get(port)[1].decode()
        if counters(now) == counters(last) or time.time() > deadline:
            break
        last = now
    exporter.send_signal(signal.SIGTERM)
    assert exporter.wait(timeout=STOP_S) == 0
    made = sorted(p.name for p in (tmp_path / "final").iterdir())
    assert len(made) == 2 and made[0].endswith(".json") and made[1].endswith(".om"), made
    assert made[1].startswith(f"gym-exporter-{socket.gethostname()}-")
    om = (tmp_path / "final" / made[1]).read_text()
    assert om.endswith("# EOF\n")
    assert '"series"' in (tmp_path / "final" / made[0]).read_text() or made[0]
    blocks = tmp_path / "blocks"
    r = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                        str(tmp_path / "final" / made[1]), str(blocks)],
                       capture_output=True, text=True, timeout=WAIT_S)
    assert r.returncode == 0, r.stderr + r.stdout
    want = counters(last)
    assert len(want) > 10, "the demo's counters"
    got = dumped(blocks)
    missing = {k: v for k, v in want.items() if got.get(k) != v}
    assert not missing, list(missing.items())[:5]
    shutil.rmtree(blocks, ignore_errors=True)
