#!/usr/bin/env python3
"""Pictures of the Grafana dashboards from real data, without Grafana (it is
not in Debian's archive): each panel's queries evaluated by a real
Prometheus over a time range and plotted, laid out as the dashboard lays
its panels out (all variables at All).

    /usr/bin/python3 dashboards/render.py [--build build] [--minutes 4] [--out docs/dashboards]

It runs what the end-to-end test runs (two demo hosts, each with its
exporter, and Prometheus with the project's rules) for --minutes, then
writes one PNG per dashboard. Needs python3-matplotlib (installed with
apt-get when missing).
"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def fill(expr, rate_interval="30s"):
    """A panel's query with the dashboard's variables at All."""
    expr = (expr.replace("$job", "gym").replace("$instance", ".*")
            .replace("$__rate_interval", rate_interval))
    return re.sub(r"\$(component|limit|server|operation)\b", ".*", expr)


def query_range(api, expr, start, end, step):
    url = f"{api}/query_range?" + urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.load(r)
    if body["status"] != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def legend(fmt, labels):
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt or "")
    return " ".join(text.split()) or ", ".join(f"{k}={v}" for k, v in labels.items()
                                               if k != "__name__")


SCALE = {"bytes": (2**20, "MiB"), "percentunit": (0.01, "%"), "s": (1, "s"),
         "ops": (1, "per s"), "short": (1, "")}


def plot_timeseries(ax, series, unit, t0):
    """`series`: (query number, name, xs, ys)."""
    divisor, label = SCALE.get(unit, (1, unit or ""))
    # Ten lines at most (a dashboard shows all; a picture stays legible): the
    # largest at the end of each query in turn, so that every query shows.
    groups = {}
    for q, name, xs, ys in sorted(series, key=lambda s: -s[3][-1] if s[3] else 0):
        groups.setdefault(q, []).append((name, xs, ys))
    chosen = []
    while len(chosen) < 10 and any(groups.values()):
        for g in groups.values():
            if g and len(chosen) < 10:
                chosen.append(g.pop(0))
    for name, xs, ys in chosen:
        ax.plot([(x - t0) / 60 for x in xs], [y / divisor for y in ys], label=name, linewidth=1.2)
    ax.set_ylabel(label)
    if chosen:
        ax.legend(fontsize=6, loc="upper left", framealpha=0.6)


def plot_heatmap(ax, series, t0):
    """Cumulative buckets (one series per le) as counts per bucket over time."""
    import numpy as np
    by_le = sorted(((float("inf") if name == "+Inf" else float(name), xs, ys)
                    for _, name, xs, ys in series), key=lambda s: s[0])
    if not by_le:
        return
    times = sorted({x for _, xs, _ in by_le for x in xs})
    index = {x: i for i, x in enumerate(times)}
    grid = np.zeros((len(by_le), len(times)))
    for row, (_, xs, ys) in enumerate(by_le):
        for x, y in zip(xs, ys):
            grid[row, index[x]] = y
    counts = np.diff(np.vstack([np.zeros(len(times)), grid]), axis=0).clip(min=0)
    ax.imshow(counts, aspect="auto", origin="lower", cmap="inferno", interpolation="nearest",
              extent=(0, (times[-1] - t0) / 60 if len(times) > 1 else 1, 0, len(by_le)))
    ax.set_yticks([i + 0.5 for i in range(len(by_le))])
    ax.set_yticklabels(["+Inf" if math.isinf(le) else f"{le:g}" for le, _, _ in by_le],
                       fontsize=6)
    ax.set_ylabel("le (s)")


def render(api, start, end, out_dir, step=5, rate_interval="30s"):
    """One PNG per dashboard in `out_dir`; returns {file: {panel title: series}}."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    found = {}
    for path in sorted(glob.glob(os.path.join(SOURCE, "dashboards", "*.json"))):
        with open(path) as f:
            d = json.load(f)
        panels = [p for p in d["panels"] if p.get("targets")]
        rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) // 8
        fig, axes = plt.subplots(rows, 2, figsize=(16, 3.1 * rows), squeeze=False)
        for ax in axes.flat:
            ax.set_visible(False)
        counts = {}
        for p in panels:
            ax = axes[p["gridPos"]["y"] // 8][p["gridPos"]["x"] // 12]
            ax.set_visible(True)
            series = []
            for q, t in enumerate(p["targets"]):
                for r in query_range(api, fill(t["expr"], rate_interval), start, end, step):
                    xs = [float(v[0]) for v in r["values"]]
                    ys = [float(v[1]) for v in r["values"]]
                    name = (r["metric"].get("le", "")) if p["type"] == "heatmap" else \
                        legend(t.get("legendFormat"), r["metric"])
                    series.append((q, name, xs, ys))
            counts[p["title"]] = len(series)
            if p["type"] == "heatmap":
                plot_heatmap(ax, series, start)
            else:
                plot_timeseries(ax, series, p.get("fieldConfig", {}).get("defaults", {})
                                .get("unit"), start)
            ax.set_title(p["title"], fontsize=10)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            ax.set_xlabel("minutes", fontsize=7)
        fig.suptitle(f"{d['title']} (two demo hosts, real Prometheus data)", fontsize=13)
        fig.tight_layout(rect=(0, 0, 1, 0.98))
        out = os.path.join(out_dir, os.path.basename(path).replace(".json", ".png"))
        fig.savefig(out, dpi=72)
        plt.close(fig)
        found[out] = counts
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--minutes", type=float, default=4)
    ap.add_argument("--out", default=os.path.join(SOURCE, "docs", "dashboards"))
    a = ap.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        subprocess.run(["apt-get", "install", "-y", "-q", "python3-matplotlib"], check=True,
                       stdout=subprocess.DEVNULL)
    os.environ["GYM_BUILD_DIR"] = os.path.abspath(a.build)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    from test_loop import Loop  # the end-to-end test's demo hosts and Prometheus

    lp = Loop()
    try:
        lp.start_host(1)
        lp.start_host(2)
        lp.start_prometheus()
        start = time.time()
        print(f"running two demo hosts and Prometheus for {a.minutes:g} minutes ...",
              file=sys.stderr, flush=True)
        time.sleep(a.minutes * 60)
        for out, counts in render(lp.api, start, time.time(), a.out).items():
            empty = [title for title, n in counts.items() if n == 0]
            print(f"{out}: {len(counts)} panels" + (f", no data in {empty}" if empty else ""))
    finally:
        lp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
