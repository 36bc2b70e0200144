"""The Grafana dashboards: valid JSON of schemaVersion 39 with unique, stable
uids; datasource, job, run and instance variables; a unit on every panel; every
rate over $__rate_interval; job and instance matchers in every selector. They
are rendered from mixin/ (tests/e2e/test_mixin.py checks they are up to date)."""
import glob
import json
import os
import re
import subprocess
import sys

import pytest

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
FILES = sorted(glob.glob(os.path.join(SOURCE, "dashboards", "*.json")))


def load(path):
    with open(path) as f:
        return json.load(f)


def queries(d):
    for p in d["panels"]:
        for t in p.get("targets", []):
            yield p, t["expr"]


def test_there_are_three_dashboards():
    assert [os.path.basename(f) for f in FILES] == [
        "gym-concurrency.json", "gym-memory.json", "gym-resources-operations.json"]


def test_uids_are_unique_and_schema_is_39():
    uids = [load(f)["uid"] for f in FILES]
    assert len(set(uids)) == len(uids)
    for f in FILES:
        d = load(f)
        assert d["schemaVersion"] == 39
        assert re.fullmatch(r"[a-z0-9-]{1,40}", d["uid"])
        ids = [p["id"] for p in d["panels"]]
        assert len(set(ids)) == len(ids)


OWN_VARIABLES = {"gym-concurrency.json": {"component", "limit", "server"},
                 "gym-resources-operations.json": {"operation", "server"},
                 "gym-memory.json": {"server"}}


@pytest.mark.parametrize("path", FILES)
def test_variables_are_datasource_job_run_instance_and_the_dashboards_own(path):
    names = {v["name"]: v for v in load(path)["templating"]["list"]}
    own = OWN_VARIABLES[os.path.basename(path)]
    assert set(names) == {"datasource", "job", "run", "instance"} | own
    # The run picks its exporters' instances (gym_run_info, joined on
    # instance); All keeps those without it.
    assert names["run"]["query"]["query"] == 'label_values(gym_run_info{job=~"$job"}, run)'
    assert 'run=~"$run"' in names["instance"]["query"]["query"]
    assert "gym_exporter_build_info" in names["instance"]["query"]["query"]
    assert names["datasource"]["type"] == "datasource"
    assert names["datasource"]["query"] == "prometheus"
    for name in own:
        v = names[name]
        assert v["query"]["query"].startswith("label_values(")
        assert 'job=~"$job", instance=~"$instance"' in v["query"]["query"], name
        assert v["allValue"] == ".*", "All must match series without the label"
    exprs = [e for _, e in queries(load(path))]
    for name in own:
        assert any(f'=~"${name}"' in e for e in exprs), f"${name} is used by no panel"
    for p in load(path)["panels"]:
        assert p["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("path", FILES)
def test_each_dashboard_links_to_the_others_keeping_time_and_variables(path):
    links = load(path)["links"]
    assert links and links[0]["tags"] == ["gym"]
    assert links[0]["includeVars"] and links[0]["keepTime"]


@pytest.mark.parametrize("path", FILES)
def test_every_panel_has_a_unit(path):
    for p in load(path)["panels"]:
        assert p["fieldConfig"]["defaults"].get("unit"), p["title"]


@pytest.mark.parametrize("path", FILES)
def test_rates_use_rate_interval(path):
    for p, expr in queries(load(path)):
        for window in re.findall(r"(?:rate|increase)\([^\[]*\[([^\]]+)\]", expr):
            assert window == "$__rate_interval", (p["title"], expr)


# A metric selector: a metric name followed by {...}.
SELECTOR = re.compile(r"\b(gym_[a-z_]+|gym:[a-z0-9_:]+|process_[a-z_]+)\{([^}]*)\}")


@pytest.mark.parametrize("path", FILES)
def test_every_selector_matches_job_and_instance(path):
    for p, expr in queries(load(path)):
        selectors = SELECTOR.findall(expr)
        assert selectors, (p["title"], expr)
        # No bare metric names without a selector.
        bare = re.findall(r"\b(gym_[a-z_]+)\b(?!\{|_)", expr)
        assert not [b for b in bare if not expr.count(b + "{")], (p["title"], expr)
        for name, matchers in selectors:
            assert 'job=~"$job"' in matchers, (p["title"], name)
            assert 'instance=~"$instance"' in matchers, (p["title"], name)
