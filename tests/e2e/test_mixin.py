"""The monitoring mixin (mixin/): the rules, alerts and dashboards this
repository ships are what it renders, every rule selects the configured
jobs, and its _config steers what it renders (a rendered variant still
passes promtool)."""
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

SOURCE = os.path.abspath(os.environ.get(
    "GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))
MIXIN = os.path.join(SOURCE, "mixin")
OUTPUTS = ["config/rules/gym-alerts.yml", "config/rules/gym-recording.yml",
           "dashboards/gym-concurrency.json", "dashboards/gym-memory.json",
           "dashboards/gym-resources-operations.json",
           "deploy/kubernetes/node/prometheusrule.yaml"]
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def render(expr):
    """What jsonnet makes of an expression over the mixin."""
    out = subprocess.run(["jsonnet", "-J", MIXIN, "-e", expr], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def rules(groups):
    return [r for g in groups["groups"] for r in g["rules"]]


def test_the_shipped_files_are_what_the_mixin_renders(tmp_path):
    subprocess.run(["bash", os.path.join(MIXIN, "build.sh"), str(tmp_path)], check=True)
    written = sorted(os.path.relpath(os.path.join(d, f), tmp_path)
                     for d, _, fs in os.walk(tmp_path) for f in fs)
    assert written == sorted(OUTPUTS)
    for name in OUTPUTS:
        with open(os.path.join(SOURCE, name)) as f:
            assert (tmp_path / name).read_text() == f.read(), \
                f"{name} is not what mixin/ renders: run bash mixin/build.sh"


# A selector of a raw series (not a recording rule's gym:...:...).
RAW = re.compile(r"\b((?:gym|up)(?:_[a-z0-9]+)*)(\{[^}]*\})?(?=[\s\[)]|$)")


def raw_selectors(expr):
    expr = re.sub(r"gym:[a-z0-9_:]+", "", expr)  # recorded series
    expr = re.sub(r"\bby \([^)]*\)|\bon \([^)]*\)", "", expr)  # label lists
    return RAW.findall(expr)


def test_every_shipped_rule_selects_the_gym_jobs():
    for name in ("gym-recording.yml", "gym-alerts.yml"):
        with open(os.path.join(SOURCE, "config", "rules", name)) as f:
            for r in rules(yaml.safe_load(f)):
                found = raw_selectors(r["expr"])
                for metric, matchers in found:
                    assert 'job=~"gym.*"' in matchers, (r.get("alert") or r["record"], metric)
                # Rules over other recorded series (which select the jobs).
                assert found or r.get("record", "").startswith(
                    ("gym:resources_operation", "gym:verdict", "gym:littles_law")) \
                    or r.get("alert", "").startswith("GymResourcesOperation") \
                    or r.get("alert") == "GymServerMemoryNearHost", r


def test_the_config_steers_selectors_windows_thresholds_and_runbooks(tmp_path):
    mixin = render("""
      local m = (import 'mixin.libsonnet') + { _config+:: {
        gymSelector: 'job="nemo", cluster="a"', ruleRateInterval: '2m',
        eventLoopBlockedSeconds: 120, runbookURLPattern: 'https://wiki/gym#%s',
        dashboardRateInterval: '1m' } };
      { rules: m.prometheusRules, alerts: m.prometheusAlerts, dashboards: m.grafanaDashboards }""")
    all_rules = rules(mixin["rules"]) + rules(mixin["alerts"])
    records = [r["record"] for r in rules(mixin["rules"])]
    assert "gym:resources_operation_outcomes:rate2m" in records
    assert "gym:resources_operation_duration_seconds:p99_2m" in records
    assert not [r for r in records if "5m" in r]
    for r in all_rules:
        assert "[5m]" not in r["expr"] or r.get("alert"), r  # recording windows follow
        for metric, matchers in raw_selectors(r["expr"]):
            assert 'job="nemo", cluster="a"' in matchers, (metric, r["expr"])
        # Every recorded series an alert uses is one the rules record.
        for used in re.findall(r"gym:[a-z0-9_:]+", r["expr"]):
            assert used in records, used
    alerts = {r["alert"]: r for r in rules(mixin["alerts"])}
    assert alerts["GymEventLoopBlocked"]["expr"].strip().endswith("> 120")
    assert alerts["GymResourcesOperationErrors"]["annotations"]["description"].count(
        "over 2 minutes (at least 12 operations in that time)") == 1
    assert all(a["annotations"]["runbook_url"] == "https://wiki/gym#" + n.lower()
               for n, a in alerts.items())
    for d in mixin["dashboards"].values():
        job = next(v for v in d["templating"]["list"] if v["name"] == "job")
        assert job["query"]["query"] == 'label_values(gym_exporter_build_info{job="nemo", cluster="a"}, job)'
        for p in d["panels"]:
            for t in p["targets"]:
                assert "$__rate_interval" not in t["expr"]
    # What it rendered is a rule file Prometheus loads.
    for kind in ("rules", "alerts"):
        path = tmp_path / f"{kind}.yml"
        path.write_text(yaml.safe_dump(mixin[kind]))
        subprocess.run([PROMTOOL, "check", "rules", str(path)], check=True,
                       capture_output=True)


def test_an_empty_selector_is_refused_with_a_clear_error():
    r = subprocess.run(["jsonnet", "-J", MIXIN, "-e",
                        "((import 'mixin.libsonnet') + {_config+:: {gymSelector: ''}}).prometheusAlerts"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "gymSelector must be a matcher" in r.stderr
