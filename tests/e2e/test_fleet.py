"""Fleet: a real Prometheus (Debian's) finds exporters through the file_sd
entries they write (--web.sd-file, service_discovery:), and the Slurm
prolog and epilog (deploy/slurm/) start and stop a job's exporter on a node
with that entry, which a per-job Prometheus (gym-job-prometheus.sh) finds,
run here with fake SLURM_* environments. Every process the
tests start is stopped at the end, also on failure."""
import json
import os
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest

from pace import HTTP_S, SANITIZED, STOP_S
from procs import Procs as BaseProcs
from procs import until as procs_until

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("GYM_BUILD_DIR", os.path.join(SOURCE, "build"))
EXPORTER = os.path.join(BUILD, "exporter", "gym-exporter")
DEMO = os.path.join(BUILD, "demo", "gym-demo")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SLURM = os.path.join(SOURCE, "deploy", "slurm")
WAIT_S = 240 if SANITIZED else 60
# A sanitized exporter answers a scrape in seconds on two cores: beside a
# sanitized gym-demo, 7-17 s were measured (ThreadSanitizer, a loaded
# machine), so a 10 s scrape timeout lost most scrapes.
SCRAPE_S = 30 if SANITIZED else 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=HTTP_S) as r:
        return json.loads(r.read())


def until(what, check, seconds=WAIT_S, detail=lambda: ""):
    return procs_until(what, check, seconds, detail)


def targets_and_log(api, log):
    targets = [(t.get("scrapeUrl"), t.get("health"), t.get("lastError"))
               for t in active_targets(api)]
    try:
        tail = log.read_text()[-3000:]
    except OSError as e:
        tail = str(e)
    return f"Prometheus's targets: {targets}\nthe exporter's log ({log}):\n{tail}"


class Procs(BaseProcs):
    def prometheus(self, sd_dir):
        port = free_port()
        cfg = self.tmp / "prometheus.yml"
        cfg.write_text(f"global:\n  scrape_interval: {SCRAPE_S}s\n  scrape_timeout: {SCRAPE_S}s\n"
                       "scrape_configs:\n  - job_name: gym\n    file_sd_configs:\n"
                       f"      - files: ['{sd_dir}/*.json']\n        refresh_interval: 1s\n")
        self.start(PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={self.tmp}/tsdb",
                   f"--web.listen-address=127.0.0.1:{port}",
                   stderr=open(self.tmp / "prometheus.log", "w"))
        return f"http://127.0.0.1:{port}/api/v1"


@pytest.fixture
def procs(tmp_path):
    p = Procs(tmp_path)
    yield p
    p.stop()


def active_targets(api):
    try:
        return get_json(f"{api}/targets?state=active")["data"]["activeTargets"]
    except OSError:
        return []  # Prometheus not up yet


def test_prometheus_finds_exporters_by_their_sd_files_and_drops_one_that_stops(procs, tmp_path):
    sd = tmp_path / "sd"
    sd.mkdir()
    # One exporter configured (service_discovery:, labels), one by the flag.
    cfg = tmp_path / "a.yml"
    cfg.write_text(f"service_discovery:\n  file: {sd}/a.json\n  target: 127.0.0.1\n"
                   "  labels:\n    gym_run: math-rl\n    cluster: 'a \"quoted\" one'\n")
    a = procs.start(EXPORTER, f"--config.file={cfg}", f"--registry.dir={tmp_path}/ra",
                    "--web.listen-address=127.0.0.1:0", stderr=open(tmp_path / "a.log", "w"))
    port_b = free_port()
    procs.start(EXPORTER, f"--registry.dir={tmp_path}/rb", f"--web.sd-file={sd}/b.json",
                f"--web.listen-address=127.0.0.1:{port_b}", stderr=open(tmp_path / "b.log", "w"))
    until("both entries written", lambda: (sd / "a.json").exists() and (sd / "b.json").exists())
    entry = json.loads((sd / "a.json").read_text())
    assert len(entry) == 1 and entry[0]["targets"][0].startswith("127.0.0.1:")
    assert entry[0]["labels"] == {"gym_run": "math-rl", "cluster": 'a "quoted" one',
                                  "host": socket.gethostname()}
    b = json.loads((sd / "b.json").read_text())[0]
    assert b["targets"] == [f"{socket.gethostname()}:{port_b}"]
    api = procs.prometheus(sd)

    def both_up():
        t = active_targets(api)
        return t if len(t) == 2 and all(x["health"] == "up" for x in t) else None

    targets = until("Prometheus scrapes both", both_up)
    by_run = {x["labels"].get("gym_run"): x for x in targets}
    assert by_run["math-rl"]["labels"]["cluster"] == 'a "quoted" one'
    assert by_run["math-rl"]["labels"]["host"] == socket.gethostname()
    assert by_run[None]["scrapeUrl"].endswith(f":{port_b}/metrics")
    # A stopped exporter removes its entry, and Prometheus drops the target.
    a.send_signal(signal.SIGTERM)
    a.wait(timeout=STOP_S)
    assert not (sd / "a.json").exists()
    until("Prometheus drops the stopped one", lambda: len(active_targets(api)) == 1)


def test_an_sd_file_that_cannot_be_written_stops_the_exporter_with_a_clear_error(tmp_path):
    out = subprocess.run([EXPORTER, f"--registry.dir={tmp_path}/r", "--web.listen-address=:0",
                          f"--web.sd-file={tmp_path}/missing/a.json"],
                         capture_output=True, text=True, timeout=WAIT_S)
    assert out.returncode != 0
    assert "cannot write service discovery file" in out.stderr and "missing" in out.stderr
    bad = subprocess.run([EXPORTER, "--check-config", f"--web.sd-file={tmp_path}/a.yaml"],
                         capture_output=True, text=True, timeout=WAIT_S)
    assert bad.returncode != 0 and "must end in .json" in bad.stderr


def gone(pid):
    """The process exited (reaped, or a zombie its new parent has not reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def slurm_env(tmp_path, job, **extra):
    return {**os.environ, "SLURM_JOB_ID": job, "SLURMD_NODENAME": "127.0.0.1",
            "SLURM_JOB_NAME": "math-rl", "SLURM_JOB_UID": str(os.getuid()),
            "GYM_SD_DIR": str(tmp_path / "sd"), "GYM_RUN_DIR": str(tmp_path / "run"),
            "GYM_EXPORTER": EXPORTER, "GYM_EXPORTER_START_SECONDS": str(WAIT_S),
            "GYM_EXPORTER_STOP_SECONDS": str(STOP_S), **extra}


def slurm(script, env):
    return subprocess.run(["bash", os.path.join(SLURM, script)], env=env, capture_output=True,
                          text=True, timeout=WAIT_S)


def test_the_slurm_prolog_starts_a_jobs_exporter_that_prometheus_finds_and_the_epilog_stops_it(
        procs, tmp_path):
    (tmp_path / "sd").mkdir()
    job = f"9{os.getpid()}"
    (tmp_path / "keep").mkdir()
    env = slurm_env(tmp_path, job, GYM_CAPTURE_DIR=str(tmp_path / "keep"))
    registry = f"/dev/shm/gym-metrics-{job}"
    try:
        assert slurm("gym-exporter-prolog.sh", env).returncode == 0
        sd_file = tmp_path / "sd" / f"slurm-{job}-127.0.0.1.json"
        entry = json.loads(sd_file.read_text())[0]
        # The job's identity is gym_run_info's, not a label of every series.
        assert entry["labels"] == {"host": socket.gethostname()}
        assert entry["targets"][0].startswith("127.0.0.1:")
        assert os.stat(registry).st_mode & 0o777 == 0o700
        # The job's tasks get the registry from the TaskProlog.
        task = slurm("gym-task-prolog.sh", env)
        assert task.stdout.strip() == f"export GYM_METRICS_DIR={registry}"
        # Alive for the whole wait (stopped below once Prometheus has its
        # limits): with 60 s, a sanitized exporter whose scrapes timed out
        # while the demo ran had nothing left to show Prometheus after.
        demo = procs.start(DEMO, f"--registry.dir={registry}", f"--duration={WAIT_S + 60}")
        api = procs.prometheus(tmp_path / "sd")

        def job_series():
            query = ("count(gym_concurrency_limit * on(instance) group_left(run) "
                     f'gym_run_info{{slurm_job_id="{job}",run="math-rl"}})')
            try:
                r = get_json(f"{api}/query?query={urllib.parse.quote(query)}")
            except OSError:
                return None
            res = r["data"]["result"]
            return res if res and float(res[0]["value"][1]) >= 4 else None

        until("Prometheus has the job's limits, joined with the job's gym_run_info", job_series,
              detail=lambda: targets_and_log(api, tmp_path / "run" / job / "exporter.log"))
        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=STOP_S)
        pid = int((tmp_path / "run" / job / "pid").read_text())
        assert slurm("gym-exporter-epilog.sh", env).returncode == 0
        assert not sd_file.exists()
        # Its final capture, kept beside the job's outputs.
        kept = sorted(p.suffix for p in (tmp_path / "keep").iterdir())
        assert kept == [".json", ".om"], kept
        assert not os.path.exists(registry) and not (tmp_path / "run" / job).exists()
        assert gone(pid)
        until("Prometheus drops the job's node", lambda: not active_targets(api))
    finally:
        slurm("gym-exporter-epilog.sh", env)
        shutil.rmtree(registry, ignore_errors=True)


def test_the_epilog_removes_the_entry_of_a_killed_exporter_and_the_prolog_never_fails_a_job(
        tmp_path):
    (tmp_path / "sd").mkdir()
    job = f"8{os.getpid()}"
    env = slurm_env(tmp_path, job)
    try:
        assert slurm("gym-exporter-prolog.sh", env).returncode == 0
        sd_file = tmp_path / "sd" / f"slurm-{job}-127.0.0.1.json"
        assert sd_file.exists()
        pid = int((tmp_path / "run" / job / "pid").read_text())
        os.kill(pid, signal.SIGKILL)  # leaves its entry behind
        until("killed", lambda: gone(pid))
        assert sd_file.exists()
        assert slurm("gym-exporter-epilog.sh", env).returncode == 0
        assert not sd_file.exists() and not os.path.exists(f"/dev/shm/gym-metrics-{job}")
    finally:
        slurm("gym-exporter-epilog.sh", env)
    # Misconfigured, the prolog says why and lets the job run.
    no_sd = slurm("gym-exporter-prolog.sh", {**env, "GYM_SD_DIR": ""})
    assert no_sd.returncode == 0 and "GYM_SD_DIR is not set" in no_sd.stderr
    broken = slurm("gym-exporter-prolog.sh", {**env, "GYM_EXPORTER": "/bin/false"})
    assert broken.returncode == 0 and "did not start" in broken.stderr
    slurm("gym-exporter-epilog.sh", env)
    assert not os.path.exists(f"/dev/shm/gym-metrics-{job}")


def test_a_per_job_prometheus_finds_the_jobs_exporter_by_its_file_sd_entry(procs, tmp_path):
    (tmp_path / "sd").mkdir()
    job = f"7{os.getpid()}"
    env = slurm_env(tmp_path, job, SLURM_SUBMIT_DIR=str(tmp_path))
    try:
        assert slurm("gym-exporter-prolog.sh", env).returncode == 0
        port = free_port()
        procs.start("bash", os.path.join(SLURM, "gym-job-prometheus.sh"),
                    env={**env, "GYM_PROMETHEUS_LISTEN": f"127.0.0.1:{port}",
                         "GYM_SCRAPE_INTERVAL": f"{SCRAPE_S}s", "GYM_PROMETHEUS": PROMETHEUS,
                         "GYM_RULES": os.path.join(SOURCE, "config", "rules")},
                    stderr=open(tmp_path / "prometheus.log", "w"))
        api = f"http://127.0.0.1:{port}/api/v1"
        query = urllib.parse.quote(f'gym_run_info{{slurm_job_id="{job}",run="math-rl"}}')

        def the_jobs_info():
            try:
                return get_json(f"{api}/query?query={query}")["data"]["result"]
            except OSError:
                return None

        (info,) = until("the job's Prometheus scrapes its exporter", the_jobs_info,
                        detail=lambda: targets_and_log(api, tmp_path / "prometheus.log"))
        assert info["metric"]["job"] == "gym"
        # Its data are beside the job's outputs, and the gym rules loaded.
        assert (tmp_path / f"gym-prometheus-{job}" / "tsdb").is_dir()
        rules = get_json(f"{api}/rules")["data"]["groups"]
        assert any(g["name"].startswith("gym") for g in rules), [g["name"] for g in rules]
    finally:
        slurm("gym-exporter-epilog.sh", env)
