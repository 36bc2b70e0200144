"""The README and docs/ say only what is true of the families: every family
they name (in backquotes, with {a,b} alternatives and * wildcards) is one the
exporter serves, as docs/metrics.md's table lists them (a table the C++ suite
keeps equal to the contract table in contract/table.h), or one of its samples;
and every page of docs/ is reachable from the README."""
import fnmatch
import glob
import os
import re

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
README = os.path.join(SOURCE, "README.md")
DOCS = sorted(glob.glob(os.path.join(SOURCE, "docs", "*.md")))
PREFIXES = ("gym_concurrency_", "gym_resources_", "gym_server_", "gym_host_", "gym_gpu_",
            "gym_exporter_")
SUFFIXES = ("", "_bucket", "_sum", "_count", "_created")


def families():
    text = open(os.path.join(SOURCE, "docs", "metrics.md")).read()
    table = text.split("## Families", 1)[1].split("\n## ", 1)[0]
    names = set(re.findall(r"^\| `([a-z0-9_:]+)` \|", table, re.M))
    assert len(names) > 50, "docs/metrics.md's table of families was not found"
    return names


def expand(pattern):
    """`a_{b,c}_d` -> a_b_d, a_c_d (one group at a time)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [x for alt in m.group(1).split(",")
            for x in expand(pattern[:m.start()] + alt + pattern[m.end():])]


def named_families(path):
    """(line, pattern) of every family a page names in backquotes."""
    for number, line in enumerate(open(path), 1):
        for span in re.findall(r"`([^`]+)`", line):
            for token in re.findall(r"\bgym_[a-z0-9_{},*]+", span):
                if not token.startswith(PREFIXES):
                    continue
                # A sample's labels (`name{mode="user"}`) are not part of its name.
                token = re.sub(r"\{[a-z_]+$", "", token)
                yield number, token


def test_every_family_the_docs_name_is_served():
    served = {f + s for f in families() for s in SUFFIXES}
    unknown = []
    checked = 0
    for path in [README, *DOCS]:
        for number, pattern in named_families(path):
            for name in expand(pattern):
                checked += 1
                if not fnmatch.filter(served, name):
                    unknown.append(f"{os.path.relpath(path, SOURCE)}:{number}: {name}")
    assert checked > 100, "the pages name families"
    assert unknown == [], "named but not served:\n" + "\n".join(unknown)


def test_the_checker_finds_what_is_not_served(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("`gym_server_up` and `gym_concurrency_{limit,bogus}` and "
                    "`gym_server_cpu_seconds_total{mode` and `gym_metrics` (a module)\n")
    served = families()
    names = [n for _, p in named_families(page) for n in expand(p)]
    assert names == ["gym_server_up", "gym_concurrency_limit", "gym_concurrency_bogus",
                     "gym_server_cpu_seconds_total"]
    assert [n for n in names if not fnmatch.filter(served, n)] == ["gym_concurrency_bogus"]


def test_every_page_of_docs_is_linked_from_the_readme():
    readme = open(README).read()
    for path in DOCS:
        assert f"(docs/{os.path.basename(path)})" in readme, f"{path} is not linked"


def test_every_alert_has_a_runbook_section_and_every_section_an_alert():
    import yaml
    with open(os.path.join(SOURCE, "config", "rules", "gym-alerts.yml")) as f:
        alerts = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
    with open(os.path.join(SOURCE, "docs", "runbook.md")) as f:
        text = f.read()
    sections = re.findall(r"^## (\S+)$", text, re.M)
    assert sorted(sections) == sorted(a["alert"] for a in alerts)
    for a in alerts:
        assert a["annotations"]["runbook_url"] == f"docs/runbook.md#{a['alert'].lower()}"
    # Each section says what it means, how to confirm it and what to do.
    for body in re.split(r"^## \S+$", text, flags=re.M)[1:]:
        assert "**Means:**" in body and "**Confirm:**" in body and "**Do:**" in body
