#!/usr/bin/env python3
"""The cost guard: what the hot paths and a scrape cost in instructions
(valgrind's callgrind, which counts them: the same on a quiet or a busy
machine), and what a writer costs in /dev/shm and the exporter in heap per
series (counted), against the budgets in bench/cost_budget.txt.

  bench/cost_guard.py BUILD_DIR [--budget FILE] [--write]

Fails (exit 1) when a figure is more than 15% over its budget; says so when
one is more than 15% under it (lower the budget in the same change). --write
rewrites the budget file with this run's figures (after a change that is
meant to cost more, or less: say why in the commit).

Instructions per operation are (I(2N) - I(N)) / N: the program's start, its
setup and its exit cancel out."""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 0.15
# Figures bounded by another of the same run, whatever their budgets say:
# an observation with an exemplar costs at most twice one without (#42).
RATIOS = {
    "instructions_observe_exemplar": ("instructions_observe", 2.0),
    # The operation scope through the C ABI by name costs at most twice the
    # same by kind (#43: the names are looked up, not parsed).
    "instructions_operation_abi_names": ("instructions_operation_abi", 2.0),
    # Python's resources_operation costs at most 1.5 times a bare `async
    # with` on the same asyncio.Semaphore (#43's goal, in instructions).
    "instructions_python_operation": ("instructions_python_bare", 1.5),
}

# probe -> N (the operation count of the shorter run)
INSTRUCTION_PROBES = {
    "observe": 20000,
    "observe_exemplar": 20000,
    "semaphore": 20000,
    "operation": 10000,
    "operation_abi": 10000,
    "operation_abi_names": 10000,
    "scrape_text": 4,
    "scrape_openmetrics": 4,
    "scrape_protobuf": 4,
}


# python_cost_probe.py's kinds -> N: `async with` blocks, bare or through
# gym_metrics.resources_operation, run by Debian's Python (the one the
# build's extension is made for) with the build's package.
PYTHON_PROBES = {"bare": 2000, "operation": 2000}
PYTHON = "/usr/bin/python3"


def instructions(command, n, env=None):
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command, str(n)],
        capture_output=True, text=True, timeout=600, env=env)
    if out.returncode != 0:
        sys.exit(f"{' '.join(command)} {n} failed ({out.returncode}):\n{out.stderr}")
    m = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if not m:
        sys.exit(f"no instruction count from callgrind:\n{out.stderr}")
    return int(m.group(1))


def measure(build):
    probe_bin = os.path.join(build, "bench", "cost_probe")
    figures = {}
    out = subprocess.run([probe_bin, "bytes"], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    raw = dict(line.split() for line in out.splitlines())
    series = int(raw.pop("scrape_series"))
    figures.update({k: float(v) for k, v in raw.items()})
    for probe, n in INSTRUCTION_PROBES.items():
        command = [probe_bin, "instructions", probe]
        per_op = (instructions(command, 2 * n) - instructions(command, n)) / n
        if probe.startswith("scrape_"):
            figures[f"instructions_{probe}_per_series"] = per_op / series
        else:
            figures[f"instructions_{probe}"] = per_op
    package = os.path.join(os.path.abspath(build), "python")
    if not os.path.isdir(os.path.join(package, "gym_metrics")):
        sys.exit(f"no Python package in {package}: build it (python3-dev) to guard its cost")
    # Python's string hashes seeded alike in both runs: the same dict work.
    env = dict(os.environ, PYTHONPATH=package, PYTHONHASHSEED="0")
    for kind, n in PYTHON_PROBES.items():
        command = [PYTHON, os.path.join(HERE, "python_cost_probe.py"), kind]
        per_op = (instructions(command, 2 * n, env) - instructions(command, n, env)) / n
        figures[f"instructions_python_{kind}"] = per_op
    return figures


def read_budget(path):
    budget = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, value = line.split()
                budget[name] = float(value)
    return budget


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--budget", default=os.path.join(HERE, "cost_budget.txt"))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    figures = measure(args.build)
    if args.write:
        with open(args.budget, "w") as f:
            f.write("# Budgets of bench/cost_guard.py (CI fails above +15%).\n"
                    "# Instructions are counted by callgrind in a plain build; bytes are\n"
                    "# /dev/shm blocks of one writer shape or exporter heap per series.\n")
            for name in sorted(figures):
                f.write(f"{name} {figures[name]:.0f}\n")
        print(f"wrote {args.budget}")
        return 0
    budget = read_budget(args.budget)
    failed = []
    print(f"{'figure':<44} {'budget':>12} {'now':>12} {'ratio':>7}")
    for name in sorted(set(budget) | set(figures)):
        if name not in figures or name not in budget:
            failed.append(name)
            print(f"{name:<44} {'missing in ' + ('run' if name not in figures else 'budget')}")
            continue
        ratio = figures[name] / budget[name] if budget[name] else float("inf")
        verdict = ""
        if ratio > 1 + TOLERANCE:
            verdict = "OVER BUDGET"
            failed.append(name)
        elif ratio < 1 - TOLERANCE:
            verdict = "cheaper: lower the budget"
        print(f"{name:<44} {budget[name]:>12.0f} {figures[name]:>12.0f} {ratio:>7.3f} {verdict}")
    for name, (base, limit) in RATIOS.items():
        if name in figures and base in figures:
            ratio = figures[name] / figures[base]
            print(f"{name} / {base}: {ratio:.2f} (at most {limit:g})")
            if ratio > limit:
                failed.append(name)
    if failed:
        failed = list(dict.fromkeys(failed))  # a figure over its budget and its ratio: once
        print(f"cost guard: {len(failed)} over budget or missing: {', '.join(failed)}")
        return 1
    print("cost guard: every figure within its budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
