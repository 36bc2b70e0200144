#!/usr/bin/env python3
"""Scrape time versus live series, in one run, for gym-exporter's exposition,
prometheus-cpp's Registry + TextSerializer (both from exporter_bench), and
Python's prometheus_client in multiprocess mode with the same number of
writer processes' files; then a scaling table of gym-exporter itself over
HTTP at 10, 100, 1,000 and 5,000 live writers: scrape time plain, gzip and zstd,
resident and private memory.

    /usr/bin/python3 bench/scrape_compare.py [--build build] [--max-python-series 20000]

Each writer holds 20 series (10 counters, 6 gauges, 4 histograms with the
contract's 13 buckets), labelled apart per writer. Run it with Debian's
/usr/bin/python3, which has python3-prometheus-client.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SERIES_PER_WRITER = 20
BOUNDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800)


def run_cpp(binary, repetitions):
    out = subprocess.run(
        [binary, "--benchmark_filter=scrape", "--benchmark_format=json",
         f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true"],
        check=True, capture_output=True, text=True).stdout
    times = {}
    for row in json.loads(out)["benchmarks"]:
        if row.get("aggregate_name") != "median":
            continue
        name, arg = row["run_name"].split("/")
        assert row["time_unit"] == "ms"
        times[(name, int(arg))] = row["real_time"]
    return times


def python_multiprocess(series, repetitions):
    """Median seconds for one generate_latest over `series / 20` writers' files."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
    from prometheus_client import multiprocess, values

    writers = series // SERIES_PER_WRITER
    directory = tempfile.mkdtemp(prefix="gym-bench-prom-mp-", dir="/dev/shm")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    try:
        for w in range(writers):
            # Each writer process has its own files, as prometheus_client
            # names them by pid.
            values.ValueClass = values.MultiProcessValue(lambda w=w: 100000 + w)
            registry = CollectorRegistry()
            c = Counter("gym_concurrency_admission_cancelled", "Waits cancelled.",
                        ["nemo_gym_concurrency_component", "nemo_gym_concurrency_limit_name"],
                        registry=registry)
            g = Gauge("gym_concurrency_queue_depth", "Callers waiting.",
                      ["nemo_gym_concurrency_component", "nemo_gym_concurrency_limit_name"],
                      registry=registry, multiprocess_mode="livesum")
            h = Histogram("gym_resources_operation_queue_duration_seconds", "Queue time.",
                          ["nemo_gym_resources_operation", "nemo_gym_resources_executor",
                           "nemo_gym_server_name"], registry=registry, buckets=BOUNDS)
            for i in range(10):
                c.labels("agent_server", f"w{w}_{i}").inc(w + i)
            for i in range(6):
                g.labels("agent_server", f"w{w}_{i}").set(i)
            for i in range(4):
                h.labels("verify", "subprocess", f"w{w}_{i}").observe(w * 0.001)
        times = []
        size = 0
        for _ in range(repetitions):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry, path=directory)
            start = time.perf_counter()
            size = len(generate_latest(registry))
            times.append(time.perf_counter() - start)
        return statistics.median(times), size
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def private_kib(pid):
    """Private (not shared) resident memory of a process, KiB."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def scrape(port, coding=None):
    """One scrape of /metrics, timed by the caller: the reply read off the
    socket as it comes and dropped (a Go client parses as it reads), not
    through urllib, whose reading takes longer than the exporter's work.
    `coding`: the Accept-Encoding asked for (gzip, zstd), or none."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
                  (f"Accept-Encoding: {coding}\r\n".encode() if coding else b"") + b"\r\n")
        buf = bytearray(1 << 22)
        n = s.recv_into(buf)
        head = bytes(buf[:n])
        while n := s.recv_into(buf):
            pass
    assert head.startswith(b"HTTP/1.1 200"), head[:100]


def exporter_memory(build, segments, scrapes=10, shape=None):
    """gym-exporter serving `segments` live segments (each of 20 series, or
    of exporter_bench's `shape`), as a dict: VmRSS (KiB)
    at start (`rss_before`) and after the scrapes (`rss`), private KiB before
    and after them (`private_before`, `private`), RssAnon (KiB) before them
    and its peak while they are served (`anon_before`, `anon_peak`, sampled
    every millisecond), median HTTP scrape seconds
    plain, gzip and zstd (`plain`, `gzip`, `zstd`), and the plain body's bytes
    (`bytes`)."""
    directory = tempfile.mkdtemp(prefix="gym-bench-rss-", dir="/dev/shm")
    holder = subprocess.Popen([f"{build}/bench/exporter_bench", f"--hold-segments={segments}",
                               f"--dir={directory}"] + ([f"--shape={shape}"] if shape else []),
                              stdout=subprocess.PIPE, text=True)
    exporter = None
    log = tempfile.NamedTemporaryFile(mode="w+", delete=False)
    try:
        assert holder.stdout.readline().strip() == "ready"
        exporter = subprocess.Popen(
            [f"{build}/exporter/gym-exporter", f"--registry.dir={directory}",
             "--web.listen-address=127.0.0.1:0"], stderr=log)
        port = None
        for _ in range(500):
            m = re.search(r"\(port (\d+)\)", open(log.name).read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.01)
        assert port, open(log.name).read()

        def rss(field="VmRSS"):
            with open(f"/proc/{exporter.pid}/status") as f:
                return int(re.search(field + r":\s+(\d+)", f.read()).group(1))

        before, private_before, anon_before = rss(), private_kib(exporter.pid), rss("RssAnon")
        # The peak of private (anonymous) memory while it serves: RssAnon
        # sampled every millisecond (VmHWM counts the mapped segments too).
        anon_peak = [anon_before]
        serving = threading.Event()

        def watch():
            while not serving.is_set():
                anon_peak[0] = max(anon_peak[0], rss("RssAnon"))
                time.sleep(0.001)
        watcher = threading.Thread(target=watch)
        watcher.start()
        times = {None: [], "gzip": [], "zstd": []}
        for _ in range(scrapes):
            for coding, took in times.items():
                start = time.perf_counter()
                scrape(port, coding)
                took.append(time.perf_counter() - start)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read()
        serving.set()
        watcher.join()
        return {"rss_before": before, "rss": rss(), "peak": rss("VmHWM"),
                "anon_before": anon_before, "anon_peak": anon_peak[0],
                "private_before": private_before,
                "private": private_kib(exporter.pid), "plain": statistics.median(times[None]),
                "gzip": statistics.median(times["gzip"]),
                "zstd": statistics.median(times["zstd"]), "bytes": len(body)}
    finally:
        if exporter:
            exporter.send_signal(signal.SIGTERM)
            exporter.wait()
        holder.send_signal(signal.SIGTERM)
        holder.wait()
        shutil.rmtree(directory, ignore_errors=True)
        log.close()
        os.unlink(log.name)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--max-python-series", type=int, default=20000)
    ap.add_argument("--writers", type=int, nargs="+", default=[10, 100, 1000, 5000],
                    help="live writers of the HTTP scaling table")
    a = ap.parse_args()
    cpp = run_cpp(f"{a.build}/bench/exporter_bench", a.repetitions)
    print(f"{'series':>8} {'writers':>8} {'gym ms':>9} {'prom-cpp ms':>12} {'ratio':>6}"
          f" {'prometheus_client ms':>21} {'speed-up':>9}")
    for series in sorted({s for _, s in cpp}):
        ours = cpp[("scrape_gym", series)]
        prom = cpp[("scrape_prometheus_cpp", series)]
        line = (f"{series:>8} {series // SERIES_PER_WRITER:>8} {ours:>9.2f} {prom:>12.2f}"
                f" {ours / prom:>6.2f}")
        if series <= a.max_python_series:
            py, _ = python_multiprocess(series, a.repetitions)
            line += f" {py * 1000:>21.1f} {py * 1000 / ours:>8.1f}x"
        print(line, flush=True)
    print("\ngym-exporter over HTTP, by live writers (20 series each), after 10 scrapes of each kind:")
    print(f"{'writers':>8} {'series':>8} {'plain ms':>9} {'gzip ms':>8} {'zstd ms':>8}"
          f" {'MB text':>8} {'RSS MiB':>8} {'private MiB':>12} {'ms/1k series':>13}")
    for writers in a.writers:
        m = exporter_memory(a.build, writers)
        print(f"{writers:>8} {writers * SERIES_PER_WRITER:>8} {m['plain'] * 1000:>9.1f}"
              f" {m['gzip'] * 1000:>8.1f} {m['zstd'] * 1000:>8.1f} {m['bytes'] / 1e6:>8.1f}"
              f" {m['rss'] / 1024:>8.1f}"
              f" {m['private'] / 1024:>12.1f}"
              f" {m['plain'] * 1000 / (writers * SERIES_PER_WRITER / 1000):>13.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
