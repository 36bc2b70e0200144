#!/usr/bin/env python3
"""Runs a Google Benchmark program and prints each case as a ratio against its
baseline measured in the same run (the machine is shared: absolute times move,
ratios much less).

Cases are named `<what>_<impl>`, with Google Benchmark's own suffixes
(`/threads:2`, `/1000`). Each `<what>_<impl>` is compared with
`<what>_<baseline>` for every --baseline that exists; a case with no baseline
is printed with its time alone. Medians of --repetitions runs are used.

    bench/ratios.py build/bench/registry_bench --baseline prometheus_cpp
"""
import argparse
import json
import subprocess
import sys


def split_name(run_name, baselines):
    """'counter_add_registry/threads:2' -> ('counter_add', 'registry', '/threads:2')."""
    head, slash, rest = run_name.partition("/")
    for b in baselines:
        if head.endswith("_" + b):
            return head[: -len(b) - 1], b, slash + rest
    what, _, impl = head.rpartition("_")
    return what, impl, slash + rest


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("program")
    ap.add_argument("--baseline", action="append", default=[])
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("extra", nargs="*", help="more flags for the program")
    a, unknown = ap.parse_known_args()
    a.extra += unknown
    out = subprocess.run(
        [a.program, "--benchmark_format=json", f"--benchmark_repetitions={a.repetitions}",
         "--benchmark_report_aggregates_only=true", *a.extra],
        check=True, capture_output=True, text=True).stdout
    medians = {}
    for row in json.loads(out)["benchmarks"]:
        if row.get("aggregate_name") == "median":
            medians[row["run_name"]] = row
    groups = {}
    for name, row in medians.items():
        what, impl, rest = split_name(name, a.baseline)
        groups.setdefault((what, rest), {})[impl] = row
    for (what, rest), impls in sorted(groups.items()):
        for impl, row in sorted(impls.items()):
            if impl in a.baseline:
                continue
            t, unit = row["real_time"], row["time_unit"]
            line = f"{what + rest:<36} {impl:<12} {t:10.2f} {unit}"
            for b in a.baseline:
                if b in impls:
                    bt = impls[b]["real_time"]
                    line += f"   vs {b} {bt:10.2f} {impls[b]['time_unit']}  ratio {t / bt:5.2f}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
