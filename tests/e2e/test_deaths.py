"""/api/v1/deaths on gym-demo: its resources servers' verifier children die
by the dozen a second; each is listed, valid against
docs/deaths.schema.json, with the server that forked it, its exit code and
how long it lived; the counter by reason agrees with the list, and the
query narrows it."""
import json
import os
import re
import time
import urllib.request

import jsonschema
import pytest

from pace import HTTP_S
from test_gym_stat import SOURCE, lone_demo, registry, start_exporter  # noqa: F401

SCHEMA = json.load(open(os.path.join(SOURCE, "docs", "deaths.schema.json")))


def get(port, path):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=HTTP_S).read()


def deaths(port, query=""):
    doc = json.loads(get(port, "/api/v1/deaths" + query))
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    return doc


def test_the_demos_verifiers_deaths_are_listed_and_counted(lone_demo, tmp_path):
    ex, port = start_exporter(tmp_path, f"--registry.dir={lone_demo}")
    try:
        for _ in range(300):
            doc = deaths(port)
            if doc["source"] == "sampling" or len(doc["deaths"]) >= 20:
                break
            time.sleep(0.1)
        if doc["source"] == "sampling":
            pytest.skip("no process events here (not root)")
        metrics = get(port, "/metrics?name[]=gym_server_process_exits_total").decode()
        after = deaths(port)
        server = doc["deaths"][0]["server_name"]
        one_server = deaths(port, f"?server={server}")
        later = deaths(port, f"?since={doc['deaths'][-1]['time_seconds']}")
        killed = deaths(port, "?reason=signal")
    finally:
        ex.terminate()
        ex.wait()
    assert {d["server_name"] for d in doc["deaths"]} <= {"math_verifier", "code_sandbox",
                                                          "llm_judge"}, doc["deaths"]
    for d in doc["deaths"]:
        assert d["reason"] == "exit_zero" and d["exit_code"] == 0 and d["signal"] is None, d
        assert d["lifetime_seconds"] is not None and d["parent_pid"] > 0, d
    # The counter and the list count the same deaths: all listed before the
    # scrape are counted, and none not listed after it.
    counted = sum(float(v) for v in re.findall(r'reason="exit_zero"\} (\S+)', metrics))
    assert len(doc["deaths"]) <= counted <= len(after["deaths"])
    assert one_server["deaths"] and {d["server_name"] for d in one_server["deaths"]} == {server}
    assert all(d["time_seconds"] >= doc["deaths"][-1]["time_seconds"] for d in later["deaths"])
    assert killed["deaths"] == []
