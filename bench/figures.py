#!/usr/bin/env python3
"""Every figure of the performance table, each against its baseline measured
in the same run, in interleaved rounds (each round measures every figure
once, in turn); prints each figure's median and range over the rounds, and
its goal.

    /usr/bin/python3 bench/figures.py [--build build-release] [--rounds 3]

Figures and their baselines:
- scrapes of 1,000 writers (20,000 series) over HTTP, plain and gzipped,
  against Python's prometheus_client in multiprocess mode rendering the same
  number of series from 1,000 writers' files (in process, without HTTP);
- the exporter's private memory after 20 scrapes of each kind, against its
  private memory before the first; its peak RSS over them, against its RSS
  before the first; its peak RssAnon while serving them (sampled every
  millisecond), against its RssAnon before the first; the same over 3 plain
  and 3 gzip scrapes of 1,000 writers of the cost guard's footprint shape
  (3 limits with admission timeouts, of a server of their own, and 20
  resources operations each);
- MeteredSemaphore acquire+release, 2 threads on one 2-slot semaphore,
  against prometheus-cpp (std::counting_semaphore + a gauge of free slots)
  and the bare 2-slot std::counting_semaphore;
- histogram observe, 2 threads, against prometheus-cpp's Histogram;
- the C++ resources-operation scope and the C ABI's (by kind and by name),
  1 thread, against the same instrumentation written with prometheus-cpp;
- Python's gym_metrics.resources_operation against a bare `async with` on
  the same asyncio.Semaphore.

Run it with Debian's /usr/bin/python3 (python3-prometheus-client) on a
Release build with benchmarks (scripts/build-release.sh builds one).
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scrape_compare  # noqa: E402


def gbench(program, filter_re):
    """{run_name: real time in ns} of one run of a Google Benchmark program."""
    out = subprocess.run([program, f"--benchmark_filter={filter_re}", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
    return {r["run_name"]: r["real_time"] * scale[r["time_unit"]]
            for r in json.loads(out)["benchmarks"]}


class Figure:
    def __init__(self, name, unit, baselines, goal, ratio_goal=None, value_goal=None):
        self.name, self.unit, self.goal = name, unit, goal
        self.baselines = baselines          # names, in order
        self.ratio_goal = ratio_goal or {}  # baseline -> highest ratio met
        self.value_goal = value_goal        # highest value met, in `unit`
        self.ours, self.base = [], {b: [] for b in baselines}

    def add(self, ours, **base):
        self.ours.append(ours)
        for b, v in base.items():
            self.base[b].append(v)

    def report(self):
        def span(values, fmt):
            return (f"{fmt.format(statistics.median(values))}"
                    f" ({fmt.format(min(values))}–{fmt.format(max(values))})")
        fmt = "{:.1f}" if self.unit in ("ms", "MiB") else "{:.0f}"
        lines = [f"{self.name}: {span(self.ours, fmt)} {self.unit}"]
        met = []
        if self.value_goal is not None:
            met.append(statistics.median(self.ours) <= self.value_goal)
        for b in self.baselines:
            ratios = [o / v for o, v in zip(self.ours, self.base[b])]
            lines.append(f"    vs {b}: {span(self.base[b], fmt)} {self.unit},"
                         f" ratio {span(ratios, '{:.2f}')}")
            if b in self.ratio_goal:
                met.append(statistics.median(ratios) <= self.ratio_goal[b])
        lines.append(f"    goal: {self.goal} -> {'met' if all(met) else 'NOT met'}"
                     " (by the median)")
        return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--writers", type=int, default=1000)
    ap.add_argument("--before", help="a Release build (with benchmarks) of the commit before "
                    "native buckets: its classic-only observe as a baseline too")
    ap.add_argument("--only", choices=["all", "observe"], default="all",
                    help="observe: only the histogram observe figures")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(a.build), "python"))
    import python_operation_bench as pyop  # needs gym_metrics, from the build

    series = a.writers * scrape_compare.SERIES_PER_WRITER
    prom_client = "prometheus_client multiprocess (same series, in process)"
    plain = Figure(f"plain scrape, {a.writers:,} writers over HTTP", "ms", [prom_client],
                   "<= 10 ms", value_goal=10)
    gzip = Figure(f"gzip scrape, {a.writers:,} writers over HTTP", "ms", [prom_client],
                  "<= 20 ms", value_goal=20)
    anon = Figure(f"exporter peak private memory (RssAnon) while serving, {a.writers:,} writers",
                  "MiB", ["RssAnon before the first scrape"], "<= 60 MiB", value_goal=60)
    anon_footprint = Figure(
        f"the same, 3 plain and 3 gzip scrapes of {a.writers:,} writers of 3 limits with "
        "timeouts and 20 operations each", "MiB", ["RssAnon before the first scrape"],
        "<= 60 MiB", value_goal=60)
    private = Figure(f"exporter private memory after 20 scrapes of each kind, {a.writers:,}"
                     " writers", "MiB", ["before the first scrape"], "<= 40 MB (38.1 MiB)",
                     value_goal=40e6 / 2**20)
    peak = Figure(f"exporter peak RSS (VmHWM) over those scrapes, {a.writers:,} writers", "MiB",
                  ["RSS before the first scrape"], "<= 100 MB (95.4 MiB)",
                  value_goal=100e6 / 2**20)
    sem = Figure("MeteredSemaphore acquire+release, 2 threads, 2 slots", "ns",
                 ["prometheus-cpp (semaphore + gauge)", "std::counting_semaphore (2 slots)"],
                 "<= 1.0x prometheus-cpp, <= 2x the bare semaphore",
                 ratio_goal={"prometheus-cpp (semaphore + gauge)": 1.0,
                             "std::counting_semaphore (2 slots)": 2.0})
    hist = Figure("histogram observe, 2 threads", "ns", ["prometheus-cpp"],
                  "no collisions below the shard count (<= 1x prometheus-cpp)",
                  ratio_goal={"prometheus-cpp": 1.0})
    before = "classic only, before native buckets (--before)"
    native = {threads: Figure(f"histogram observe with native buckets, {threads} thread"
                              f"{'s' if threads > 1 else ''}", "ns",
                              ["classic buckets only"] + ([before] if a.before else []),
                              "<= 1.5x classic only", ratio_goal={"classic buckets only": 1.5})
              for threads in (1, 2)}
    cpp = Figure("C++ operation scope, 1 thread", "ns", ["prometheus-cpp"],
                 "<= 0.7x prometheus-cpp", ratio_goal={"prometheus-cpp": 0.7})
    abi = Figure("C ABI operation scope (by kind), 1 thread", "ns", ["prometheus-cpp"],
                 "<= 0.5x prometheus-cpp", ratio_goal={"prometheus-cpp": 0.5})
    names = Figure("C ABI operation scope (by name), 1 thread", "ns", ["prometheus-cpp"],
                   "<= 1.2x prometheus-cpp", ratio_goal={"prometheus-cpp": 1.2})
    py = Figure("Python resources_operation", "ns", ["bare async with"],
                "<= 1.5x a bare async with", ratio_goal={"bare async with": 1.5})
    figures = [plain, gzip, private, peak, anon, anon_footprint, sem, hist, native[1], native[2], cpp, abi, names,
               py]
    if a.only == "observe":
        figures = [hist, native[1], native[2]]

    for r in range(a.rounds):
        print(f"round {r + 1} of {a.rounds} ...", file=sys.stderr, flush=True)
        t = gbench(f"{a.build}/bench/registry_bench", "histogram_observe")
        old = gbench(f"{a.before}/bench/registry_bench", "histogram_observe_registry") \
            if a.before else {}
        hist.add(t["histogram_observe_registry/threads:2"],
                 **{"prometheus-cpp": t["histogram_observe_prometheus_cpp/threads:2"]})
        for threads, f in native.items():
            base = {"classic buckets only": t[f"histogram_observe_registry/threads:{threads}"]}
            if a.before:
                base[before] = old[f"histogram_observe_registry/threads:{threads}"]
            f.add(t[f"histogram_observe_native/threads:{threads}"], **base)
        if a.only == "observe":
            continue
        m = scrape_compare.exporter_memory(a.build, a.writers, scrapes=20)
        client, _ = scrape_compare.python_multiprocess(series, 1)
        plain.add(m["plain"] * 1e3, **{prom_client: client * 1e3})
        gzip.add(m["gzip"] * 1e3, **{prom_client: client * 1e3})
        private.add(m["private"] / 1024, **{"before the first scrape": m["private_before"] / 1024})
        peak.add(m["peak"] / 1024, **{"RSS before the first scrape": m["rss_before"] / 1024})
        anon.add(m["anon_peak"] / 1024,
                 **{"RssAnon before the first scrape": m["anon_before"] / 1024})
        f = scrape_compare.exporter_memory(a.build, a.writers, scrapes=3, shape="footprint")
        anon_footprint.add(f["anon_peak"] / 1024,
                           **{"RssAnon before the first scrape": f["anon_before"] / 1024})
        t = gbench(f"{a.build}/bench/primitives_bench",
                   "semaphore2|operation_scope_(registry|abikind|abinames|prometheus_cpp)"
                   "/threads:1")
        sem.add(t["semaphore2_metered/threads:2"],
                **{"prometheus-cpp (semaphore + gauge)": t["semaphore2_prometheus_cpp/threads:2"],
                   "std::counting_semaphore (2 slots)":
                       t["semaphore2_counting_semaphore/threads:2"]})
        cpp.add(t["operation_scope_registry/threads:1"],
                **{"prometheus-cpp": t["operation_scope_prometheus_cpp/threads:1"]})
        abi.add(t["operation_scope_abikind/threads:1"],
                **{"prometheus-cpp": t["operation_scope_prometheus_cpp/threads:1"]})
        names.add(t["operation_scope_abinames/threads:1"],
                  **{"prometheus-cpp": t["operation_scope_prometheus_cpp/threads:1"]})
        bare = asyncio.run(pyop.bare(asyncio.Semaphore(4))) * 1e9
        scoped = asyncio.run(pyop.scoped(asyncio.Semaphore(4), pyop.gym_metrics.resources_operation))
        py.add(scoped * 1e9, **{"bare async with": bare})

    print(f"{a.rounds} interleaved rounds; median (range)")
    for f in figures:
        print(f.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
