"""The exposition formats from a real exporter beside the demo. OpenMetrics
1.0.0: negotiated from
the Accept headers Prometheus sends, and held to the OpenMetrics 1.0 text
grammar by a strict checker written here from the specification (metadata
before samples, families never interleaved, sample names by type, unit a
suffix of the name, histogram buckets cumulative and ending in +Inf equal to
_count, escapes, numbers, # EOF last). Delimited protobuf: decoded by a
wire-format reader written here. Both carry the samples of the text 0.0.4
exposition."""
import gzip
import math
import struct
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest
from prometheus_client import parser as text_parser
from prometheus_client.openmetrics import parser as openmetrics_parser

from pace import HTTP_S, SANITIZED, SHM_PREFIX

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("GYM_BUILD_DIR", os.path.join(SOURCE, "build"))
# A sanitized build (ctest sets GYM_SANITIZE) can take more than a second to
# answer a scrape of the demo on a loaded machine: Prometheus scrapes it less
# often there.
# Sanitized, a scrape beside the demo takes 1-2 s on an idle machine and up
# to 17 s on a loaded one (ThreadSanitizer, measured): with 3 s, Prometheus
# lost every scrape for three minutes in one CI run.
SCRAPE_S = 15 if SANITIZED else 1
# How long a Prometheus query may take to see what it waits for.
PROMETHEUS_WAIT_S = 300 if SANITIZED else 60

PROMETHEUS_2 = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
PROMETHEUS_3 = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
                "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;"
                "escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1")
OM_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]Inf|NaN"
ESCAPED = r'(?:[^"\\\n]|\\\\|\\n|\\")*'
SAMPLE = re.compile(rf'^({NAME})(\{{(?:{LABEL}="{ESCAPED}"(?:,{LABEL}="{ESCAPED}")*)?\}})?'
                    rf" ({NUMBER})(?: ({NUMBER}))?$")
LABEL_PAIR = re.compile(rf'({LABEL})="({ESCAPED})"')
# An exemplar after a sample (OpenMetrics: on counters' _total and
# histograms' _bucket lines): " # {labels} value [timestamp]".
EXEMPLAR = re.compile(rf'^(.*) # \{{((?:{LABEL}="{ESCAPED}"(?:,{LABEL}="{ESCAPED}")*)?)\}}'
                      rf" (?:{NUMBER})(?: (?:{NUMBER}))?$")
# With UTF-8 names (escaping=allow-utf-8): a name that is not a legacy one is
# quoted, a metric's first inside the braces: {"a.b",c="d","e.f"="g"} 1.
QUOTED = rf'"{ESCAPED}"'
ANY_LABEL = rf"(?:{LABEL}|{QUOTED})"
UTF8_LABEL_PAIR = re.compile(rf'({LABEL}|{QUOTED})="({ESCAPED})"')


def unquote(name):
    if name.startswith('"'):
        return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), name[1:-1])
    return name


def parse_sample(line):
    """(name, [(label, value)], value, timestamp) of a sample line, names
    unquoted; None when it is not one. Legacy names, or quoted UTF-8 ones."""
    m = SAMPLE.match(line)
    if m:
        name, labels, value, ts = m.groups()
        return name, LABEL_PAIR.findall(labels or ""), value, ts
    m = re.match(rf'^\{{({QUOTED})((?:,{ANY_LABEL}="{ESCAPED}")*)\}} ({NUMBER})(?: ({NUMBER}))?$',
                 line)
    if m is None:
        m2 = re.match(rf'^({NAME})\{{({ANY_LABEL}="{ESCAPED}"(?:,{ANY_LABEL}="{ESCAPED}")*)\}}'
                      rf" ({NUMBER})(?: ({NUMBER}))?$", line)
        if m2 is None:
            return None
        name, labels, value, ts = m2.groups()
    else:
        name, labels, value, ts = m.groups()
        name = unquote(name)
    pairs = [(unquote(k), v) for k, v in UTF8_LABEL_PAIR.findall(labels or "")]
    return name, pairs, value, ts


SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "unknown": ("",),
            "histogram": ("_bucket", "_count", "_sum", "_created"),
            "summary": ("", "_count", "_sum", "_created"), "info": ("_info",),
            "stateset": ("",), "gaugehistogram": ("_bucket", "_gcount", "_gsum")}


def check_openmetrics(text):
    """Raises AssertionError at the first break of the OpenMetrics 1.0 text
    grammar; returns {(sample name, labels): value}."""
    assert text.endswith("# EOF\n"), "must end with # EOF and a newline"
    lines = text[:-len("# EOF\n")].split("\n")
    assert lines[-1] == "", "the line before # EOF ends with a newline"
    lines = lines[:-1]
    families, done, samples = {}, set(), {}
    current = None
    histograms = {}
    for n, line in enumerate(lines, 1):
        where = f"line {n}: {line!r}"
        assert line, f"{where}: empty line"
        if line.startswith("#"):
            m = re.match(rf"^# (HELP|TYPE|UNIT) ({NAME}|{QUOTED}) ?(.*)$", line)
            assert m, f"{where}: not HELP, TYPE or UNIT"
            kind, name, rest = m.groups()
            name = unquote(name)
            if name != current:
                assert name not in done, f"{where}: family {name} interleaved"
                if current:
                    done.add(current)
                current = name
                families[name] = {"type": "unknown", "seen": set(), "samples": False}
            fam = families[name]
            assert not fam["samples"], f"{where}: metadata after samples"
            assert kind not in fam["seen"], f"{where}: {kind} twice"
            fam["seen"].add(kind)
            if kind == "TYPE":
                assert rest in SUFFIXES, f"{where}: unknown type"
                fam["type"] = rest
                assert not (rest == "counter" and name.endswith("_total")), \
                    f"{where}: a counter family is named without _total"
            elif kind == "UNIT":
                assert re.fullmatch(r"[a-zA-Z0-9_:]+", rest), f"{where}: bad unit"
                assert name.endswith("_" + rest), f"{where}: unit is not a suffix"
            else:
                assert re.fullmatch(ESCAPED, rest), f"{where}: bad HELP escape"
            continue
        exemplar = EXEMPLAR.match(line)
        if exemplar:  # a sample, then " # {labels} value [timestamp]"
            line, ex_labels = exemplar.group(1), exemplar.group(2)
            length = sum(len(k) + len(v) for k, v in LABEL_PAIR.findall(ex_labels))
            assert length <= 128, f"{where}: an exemplar's labels over 128 characters"
        parsed = parse_sample(line)
        assert parsed, f"{where}: not a sample"
        name, pairs, value, timestamp = parsed
        assert current and name.startswith(current), f"{where}: outside its family"
        fam = families[current]
        suffix = name[len(current):]
        assert suffix in SUFFIXES[fam["type"]], f"{where}: {suffix!r} in a {fam['type']}"
        assert not exemplar or suffix in ("_bucket", "_total"), \
            f"{where}: an exemplar on a {suffix!r} sample"
        fam["samples"] = True
        names = [k for k, _ in pairs]
        assert len(names) == len(set(names)), f"{where}: a label twice"
        key = (name, tuple(pairs))
        assert key not in samples, f"{where}: the same sample twice"
        v = float(value.replace("Inf", "inf"))
        samples[key] = v
        if fam["type"] == "counter" and suffix == "_total":
            assert v >= 0 and not math.isnan(v), f"{where}: a counter below 0 or NaN"
        if fam["type"] == "histogram":
            rest = tuple(p for p in pairs if p[0] != "le")
            h = histograms.setdefault((current, rest), {"buckets": [], "count": None})
            if suffix == "_bucket":
                le = dict(pairs)["le"]
                assert re.fullmatch(NUMBER, le), f"{where}: le is not a number"
                assert h["count"] is None, f"{where}: a bucket after _count"
                assert v == int(v) and v >= 0, f"{where}: a bucket count is a whole number"
                h["buckets"].append((float(le.replace("Inf", "inf")), v))
            elif suffix == "_count":
                h["count"] = v
    for (family, rest), h in histograms.items():
        b = h["buckets"]
        assert b and b[-1][0] == math.inf, f"{family}{rest}: no +Inf bucket last"
        assert all(x[0] < y[0] for x, y in zip(b, b[1:])), f"{family}{rest}: le not increasing"
        assert all(x[1] <= y[1] for x, y in zip(b, b[1:])), f"{family}{rest}: not cumulative"
        assert h["count"] == b[-1][1], f"{family}{rest}: _count is not the +Inf bucket"
    return samples


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, accept=None, encoding=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if accept is not None:
        req.add_header("Accept", accept)
    if encoding is not None:
        req.add_header("Accept-Encoding", encoding)
    with urllib.request.urlopen(req, timeout=HTTP_S) as r:
        body = r.read()
        if r.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return r.headers, body.decode()


EXPORTER_LOG = None  # the exporter's debug log: one line per scrape, with its format
DEMO_GROUP = None  # the demo's process group


class frozen:
    """The demo's processes paused (SIGSTOP), so that two scrapes see the same
    series: the demo starts writers and series as it runs."""

    def __enter__(self):
        os.killpg(DEMO_GROUP, signal.SIGSTOP)
        time.sleep(0.2)

    def __exit__(self, *exc):
        os.killpg(DEMO_GROUP, signal.SIGCONT)


def sample_marks(port):
    """Each sampling collector's last sample's duration, as served: a new
    sample changes it."""
    _, text = get(port)
    return re.findall(r"^gym_exporter_collector_sample_duration_seconds\{.*$", text, re.M)


def one_sample(port, *fetches):
    """The replies of `fetches`, all read from one sample of each sampling
    collector. The demo is paused (frozen()), but a collector that samples
    on an interval may still sample between two of them (the servers
    collector, every 5 s: a server declared just before the pause, or a
    verifier's oldest process, appearing), so they are taken again when a
    collector's last sample changed meanwhile, ten times at most."""
    for _ in range(10):
        before = sample_marks(port)
        assert before, "no collector's sample duration is served"
        replies = [fetch() for fetch in fetches]
        if sample_marks(port) == before:
            return replies
    raise AssertionError("a collector sampled between the replies ten times running")


@pytest.fixture(scope="module")
def exporter():
    d = tempfile.mkdtemp(prefix=SHM_PREFIX + "om-", dir="/dev/shm")
    registry = os.path.join(d, "registry")
    port = free_port()
    global DEMO_STARTED
    DEMO_STARTED = time.time()
    # Its own session, so that its process group can be paused (frozen()).
    procs = [subprocess.Popen([f"{BUILD}/demo/gym-demo", f"--registry.dir={registry}"],
                              stderr=subprocess.DEVNULL, start_new_session=True)]
    global DEMO_GROUP
    DEMO_GROUP = os.getpgid(procs[0].pid)
    global EXPORTER_LOG
    EXPORTER_LOG = os.path.join(d, "exporter.log")
    procs.append(subprocess.Popen(
        [f"{BUILD}/exporter/gym-exporter", f"--registry.dir={registry}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=debug"],
        stderr=open(EXPORTER_LOG, "w")))
    try:
        deadline = time.time() + 60
        while True:
            try:
                _, text = get(port)
                # The demo's operations, and the servers' CPU, which the cpu
                # collector serves from its first sample of the servers on.
                if ("gym_resources_operation_duration_seconds_bucket" in text
                        and "gym_server_cpu_seconds_total" in text):
                    break
            except OSError:
                pass
            assert time.time() < deadline, "the demo's series did not arrive"
            time.sleep(0.3)
        yield port
    finally:
        os.killpg(DEMO_GROUP, signal.SIGCONT)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("accept", [PROMETHEUS_2, PROMETHEUS_3])
def test_prometheus_gets_openmetrics_that_a_strict_parser_accepts(exporter, accept):
    headers, text = get(exporter, accept, "gzip")
    assert headers["Vary"] == "Accept, Accept-Encoding"
    samples = check_openmetrics(text)
    assert "# TYPE gym_exporter_http_requests counter\n" in text
    if accept == PROMETHEUS_3:  # UTF-8 names: the OpenTelemetry ones (below)
        assert headers["Content-Type"] == OM_TYPE + "; escaping=allow-utf-8"
        assert any(k[0] == "gym.concurrency.admissions_total" for k in samples)
        return
    assert headers["Content-Type"] == OM_TYPE
    assert any(k[0] == "gym_concurrency_admissions_total" for k in samples)
    assert "# TYPE gym_resources_operation_duration_seconds histogram\n" in text
    assert "# UNIT gym_resources_operation_duration_seconds seconds\n" in text


@pytest.mark.parametrize("accept", [None, "*/*", "text/plain", "application/json"])
def test_everyone_else_gets_text_0_0_4(exporter, accept):
    headers, text = get(exporter, accept)
    assert headers["Content-Type"] == TEXT_TYPE
    assert "# EOF" not in text
    assert "# TYPE gym_exporter_http_requests_total counter\n" in text


def test_both_formats_carry_the_same_samples(exporter):
    with frozen():
        (_, om), (_, text) = one_sample(exporter, lambda: get(exporter, PROMETHEUS_2),
                                        lambda: get(exporter))
    om_samples = check_openmetrics(om)
    om_keys = {k for k in om_samples if not k[0].endswith("_created")}
    text_keys = set()
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        text_keys.add((m.group(1), tuple(LABEL_PAIR.findall(m.group(2) or ""))))
    # The request counters count these two scrapes themselves, by format.
    assert om_keys - text_keys <= {k for k in om_keys if "http_requests" in k[0]}
    assert text_keys - om_keys <= {k for k in text_keys if "http_requests" in k[0]}
    assert len(om_keys) > 100


REGISTRY_FAMILIES = ("gym_concurrency_", "gym_resources_", "gym_python_")

# The seeds' OpenTelemetry names (concurrency.txt, resources_operations.txt),
# and those the later families take in their image.
OTEL_FAMILIES = {
    "gym.concurrency.limit": "gym_concurrency_limit",
    "gym.concurrency.active": "gym_concurrency_active",
    "gym.concurrency.available": "gym_concurrency_available",
    "gym.concurrency.queue_depth": "gym_concurrency_queue_depth",
    "gym.concurrency.admission_timeouts": "gym_concurrency_admission_timeouts",
    "gym.concurrency.admission_cancelled": "gym_concurrency_admission_cancelled",
    "gym.concurrency.admissions": "gym_concurrency_admissions",
    "gym.concurrency.hold_time": "gym_concurrency_hold_seconds",
    "gym.concurrency.wait_duration": "gym_concurrency_wait_duration_seconds",
    "gym.concurrency.oldest_wait": "gym_concurrency_oldest_wait_seconds",
    "gym.concurrency.oldest_hold": "gym_concurrency_oldest_hold_seconds",
    "gym.concurrency.processes": "gym_concurrency_processes",
    "gym.concurrency.stranded_slots": "gym_concurrency_stranded_slots",
    "gym.resources.operation.queue_duration": "gym_resources_operation_queue_duration_seconds",
    "gym.resources.operation.duration": "gym_resources_operation_duration_seconds",
    "gym.resources.operation.queued": "gym_resources_operation_queued",
    "gym.resources.operation.active": "gym_resources_operation_active",
    "gym.resources.operation.oldest_queued": "gym_resources_operation_oldest_queued_seconds",
    "gym.resources.operation.oldest_active": "gym_resources_operation_oldest_active_seconds",
    "gym.python.event_loop.lag": "gym_python_event_loop_lag_seconds",
    "gym.python.event_loop.blocked": "gym_python_event_loop_blocked_seconds",
    "gym.python.event_loop.tasks": "gym_python_event_loop_tasks",
    "gym.python.gc.pause": "gym_python_gc_pause_seconds",
    "gym.python.gc.collections": "gym_python_gc_collections",
    "gym.python.threads": "gym_python_threads",
}
OTEL_LABELS = {
    "nemo.gym.concurrency.component": "nemo_gym_concurrency_component",
    "nemo.gym.concurrency.limit_name": "nemo_gym_concurrency_limit_name",
    "nemo.gym.server.name": "nemo_gym_server_name",
    "nemo.gym.server.type": "nemo_gym_server_type",
    "nemo.gym.resources.operation": "nemo_gym_resources_operation",
    "nemo.gym.resources.executor": "nemo_gym_resources_executor",
    "nemo.gym.resources.operation.outcome": "nemo_gym_resources_operation_outcome",
    "nemo.gym.concurrency.wait_outcome": "nemo_gym_concurrency_wait_outcome",
    "nemo.gym.python.gc.generation": "nemo_gym_python_gc_generation",
}


def to_prometheus(key):
    """A sample key with OpenTelemetry names, in today's underscore names."""
    name, labels = key
    for otel, prom in OTEL_FAMILIES.items():
        if name.startswith(otel) and name[len(otel):] in ("", "_total", "_bucket", "_count",
                                                           "_sum", "_created"):
            name = prom + name[len(otel):]
            break
    return name, tuple((OTEL_LABELS.get(k, k), v) for k, v in labels)


def test_prometheus_3_gets_the_opentelemetry_names_and_the_same_samples(exporter):
    """Prometheus 3 accepts UTF-8 names (escaping=allow-utf-8): it gets the
    seeds' dotted names, quoted, in OpenMetrics that the checker accepts, and
    they are the samples Prometheus 2 gets under today's names. Protobuf
    with escaping=allow-utf-8 carries the same names."""
    utf8_protobuf = ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                     "encoding=delimited;escaping=allow-utf-8")
    with frozen():
        (h3, om3), (h2, om2), (hp, body) = one_sample(
            exporter, lambda: get(exporter, PROMETHEUS_3), lambda: get(exporter, PROMETHEUS_2),
            lambda: get_bytes(exporter, utf8_protobuf))
    assert h3["Content-Type"] == OM_TYPE + "; escaping=allow-utf-8"
    assert h2["Content-Type"] == OM_TYPE
    assert hp["Content-Type"].endswith("encoding=delimited; escaping=allow-utf-8")
    utf8, legacy = check_openmetrics(om3), check_openmetrics(om2)
    assert '# TYPE "gym.concurrency.limit" gauge' in om3
    assert '# TYPE "gym.concurrency.admission_cancelled" counter' in om3
    assert '# TYPE "gym.resources.operation.duration" histogram' in om3
    assert re.search(r'^\{"gym\.concurrency\.queue_depth","nemo\.gym\.concurrency\.component"=',
                     om3, re.M)
    assert "gym_concurrency_limit" not in om3 and "nemo_gym_" not in om3
    mapped = {to_prometheus(k): v for k, v in utf8.items()}
    requests = {k for k in set(mapped) | set(legacy) if "http_requests" in k[0]}
    assert set(mapped) - requests == set(legacy) - requests
    for k in set(legacy) - requests:
        # The registry's series, but ages: they grow while the demo is paused.
        if k[0].startswith(REGISTRY_FAMILIES) and "oldest" not in k[0] and "blocked" not in k[0]:
            assert mapped[k] == legacy[k], k
    names = {f["name"] for f in decode_delimited(body)}
    assert {"gym.concurrency.limit", "gym.concurrency.admission_cancelled_total",
            "gym.resources.operation.duration"} <= names
    assert not any(n.startswith(REGISTRY_FAMILIES) for n in names)


def unescape(name, scheme):
    """A name as a scraper that asked for `scheme` reads it back (the
    escaping-schemes document, written here from it)."""
    if scheme == "dots":
        return re.sub(r"_dot_|__", lambda m: "." if m.group(0) == "_dot_" else "_", name)
    if scheme == "values" and name.startswith("U__"):
        return re.sub(r"__|_([0-9A-Fa-f]+)_",
                      lambda m: "_" if m.group(0) == "__" else chr(int(m.group(1), 16)), name[3:])
    return name


def text_samples(text):
    """{(name, labels): value} of a text 0.0.4 / 1.0.0 exposition."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("#") and line:
            name, labels, value, _ = parse_sample(line)
            out[(name, tuple(labels))] = value
    return out


def registry_values(samples):
    """The registry's series that hold still while the demo is paused."""
    return {k: v for k, v in samples.items()
            if k[0].startswith(("gym.concurrency.", "gym.resources.", "gym.python."))
            and "oldest" not in k[0] and "blocked" not in k[0]}


def same_series(escaped, want, scheme):
    """Whether an escaped reply's series, unescaped, are those of an
    allow-utf-8 reply (the requests counters aside)."""
    back = {(unescape(n, scheme), tuple((unescape(k, scheme), v) for k, v in labels))
            for n, labels in escaped}
    keys = {k for k in back | set(want) if "http_requests" not in k[0]}
    return back & keys == set(want) & keys


@pytest.mark.parametrize("scheme", ["dots", "values"])
@pytest.mark.parametrize("fmt", ["openmetrics", "text"])
def test_dots_and_values_escape_the_opentelemetry_names_back_to_themselves(exporter, scheme, fmt):
    """escaping=dots and escaping=values (Prometheus 3) get the OpenTelemetry
    names escaped: legacy names only, the Content-Type says the scheme, and
    unescaped they are the allow-utf-8 reply's samples. prometheus_client's
    parser reads them."""
    if fmt == "openmetrics":
        accept, utf8_accept = (f"application/openmetrics-text;version=1.0.0;escaping={scheme}",
                               "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8")
        want_type, parse = f"{OM_TYPE}; escaping={scheme}", check_openmetrics
    else:
        accept, utf8_accept = (f"text/plain;version=1.0.0;escaping={scheme}",
                               "text/plain;version=1.0.0;escaping=allow-utf-8")
        want_type, parse = f"text/plain; version=1.0.0; charset=utf-8; escaping={scheme}", \
            text_samples
    # A pair of replies read from one sample: the servers collector may
    # sample between two scrapes (a verifier's oldest process appearing),
    # so a pair whose series differ is taken again, five times at most.
    with frozen():
        for _ in range(5):
            headers, body = get(exporter, accept)
            _, utf8 = get(exporter, utf8_accept)
            if same_series(parse(body), parse(utf8), scheme):
                break
    assert headers["Content-Type"] == want_type
    escaped = parse(body)
    for name, labels in escaped:
        assert re.fullmatch(NAME, name), name
        assert all(re.fullmatch(LABEL, k) for k, _ in labels), labels
    if scheme == "dots":
        assert "# TYPE gym_dot_resources_dot_operation_dot_duration histogram" in body
        assert re.search(r"^gym_dot_concurrency_dot_limit\{.*nemo_dot_gym_dot_server_dot_name=",
                         body, re.M)
        assert "gym__exporter__scrape__duration__seconds" in body
    else:
        assert "# TYPE U__gym_2E_resources_2E_operation_2E_duration histogram" in body
        assert re.search(r"^U__gym_2E_concurrency_2E_limit\{.*U__nemo_2E_gym_2E_server_2E_name=",
                         body, re.M)
        assert "gym_exporter_scrape_duration_seconds" in body, "a legacy name stays as it is"
    back = {(unescape(n, scheme), tuple((unescape(k, scheme), v) for k, v in labels)): value
            for (n, labels), value in escaped.items()}
    want = parse(utf8)
    requests = {k for k in set(back) | set(want) if "http_requests" in k[0]}
    assert set(back) - requests == set(want) - requests
    assert registry_values(back) == registry_values(want) and registry_values(want)
    parser = (openmetrics_parser if fmt == "openmetrics" else text_parser)
    families = {f.name for f in parser.text_string_to_metric_families(body)}
    assert ("gym_dot_concurrency_dot_limit" if scheme == "dots"
            else "U__gym_2E_concurrency_2E_limit") in families


@pytest.mark.parametrize("scheme", ["underscores", "bananas"])
def test_underscores_and_an_unknown_scheme_get_the_legacy_names(exporter, scheme):
    """escaping=underscores, and a scheme the document does not know (which
    falls back to underscores), get today's names, and the Content-Type says
    underscores."""
    with frozen():
        (headers, body), (_, legacy), (text_headers, _) = one_sample(
            exporter,
            lambda: get(exporter, f"application/openmetrics-text;version=1.0.0;escaping={scheme}"),
            lambda: get(exporter, PROMETHEUS_2),
            lambda: get(exporter, f"text/plain;version=1.0.0;escaping={scheme}"))
    assert headers["Content-Type"] == OM_TYPE + "; escaping=underscores"
    assert text_headers["Content-Type"] == \
        "text/plain; version=1.0.0; charset=utf-8; escaping=underscores"
    got, want = check_openmetrics(body), check_openmetrics(legacy)
    requests = {k for k in set(got) | set(want) if "http_requests" in k[0]}
    assert set(got) - requests == set(want) - requests
    families = {f.name for f in openmetrics_parser.text_string_to_metric_families(body)}
    assert "gym_resources_operation_duration_seconds" in families


def test_counters_and_histograms_say_since_when_they_count(exporter):
    """Every counter and histogram from the registry has a _created sample in
    OpenMetrics and a created_timestamp in protobuf, the same: the start of
    the earliest writer (or folded totals) it adds up, so after the demo
    started and before now. Every other counter, histogram and summary has
    one too, but a cgroup's."""
    with frozen():
        (_, om), (_, body) = one_sample(exporter, lambda: get(exporter, PROMETHEUS_2),
                                        lambda: get_bytes(exporter, PROTOBUF))
    now = time.time()
    samples = check_openmetrics(om)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", om, re.M))
    created = {}
    for (name, labels), value in samples.items():
        if name.endswith("_created"):
            created[(name[:-len("_created")], labels)] = value
    wanted = 0
    for (name, labels) in samples:
        base = re.sub(r"_(total|bucket|count|sum|created)$", "", name)
        if not base.startswith(REGISTRY_FAMILIES) or types.get(base) not in ("counter",
                                                                          "histogram"):
            continue
        key = (base, tuple(kv for kv in labels if kv[0] != "le"))
        assert key in created, key
        assert DEMO_STARTED - 1 <= created[key] <= now, (key, created[key], DEMO_STARTED)
        wanted += 1
    assert wanted > 20
    # The rest: the exporter's own counters count from its start, its CPU
    # from its process's start, a server's CPU from its root's start, the
    # host's OOM kills from the boot.
    def since(family):
        return [v for (name, _), v in created.items() if name == family]
    with open("/proc/stat") as f:
        boot = int(re.search(r"^btime (\d+)$", f.read(), re.M).group(1))
    assert since("gym_host_oom_kills") == [boot]
    if os.path.exists("/proc/pressure/cpu"):
        assert since("gym_host_pressure_seconds") and \
            set(since("gym_host_pressure_seconds")) == {boot}
    # Every counter, histogram and summary series of any family says it;
    # only a cgroup's counts cannot (the kernel keeps no creation time of a
    # cgroup: docs/metrics.md).
    lacking = set()
    for (name, labels) in samples:
        base = re.sub(r"_(total|bucket|count|sum|created)$", "", name)
        if (types.get(base) in ("counter", "histogram", "summary")
                and not base.startswith("gym_server_cgroup_")):
            key = (base, tuple(kv for kv in labels if kv[0] not in ("le", "quantile")))
            if key not in created:
                lacking.add(key)
    assert not lacking, sorted(lacking)[:10]
    assert since("process_cpu_seconds") == [samples[("process_start_time_seconds", ())]]
    for family in ("gym_exporter_http_requests", "gym_exporter_registry_retired_segments",
                   "gym_exporter_memory_sample_overruns", "gym_exporter_contract_violations",
                   "gym_server_cpu_seconds"):
        assert since(family), family
        assert all(DEMO_STARTED - 1 <= v <= now for v in since(family)), (family, since(family))
    proto = {}
    for fam in decode_delimited(body):
        base = fam["name"][:-len("_total")] if fam["name"].endswith("_total") else fam["name"]
        for m in fam["metrics"]:
            if m["created"] is not None:
                proto[(base, tuple(m["labels"]))] = m["created"]
    assert set(proto) == set(created)
    for key, value in created.items():
        assert abs(proto[key] - value) < 1e-6, key


def test_the_checker_refuses_what_breaks_the_grammar():
    good = "# TYPE a counter\n# HELP a x\na_total 1\n# EOF\n"
    check_openmetrics(good)
    for bad in ["# TYPE a counter\na_total 1\n",                        # no EOF
                "# TYPE a_total counter\na_total 1\n# EOF\n",           # _total family
                "# TYPE a counter\na 1\n# EOF\n",                       # bare counter
                "# TYPE a gauge\n# UNIT a seconds\na 1\n# EOF\n",       # unit not a suffix
                "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n# EOF\n",  # interleaved
                "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n# EOF\n",         # label twice
                "# TYPE a gauge\na 1e\n# EOF\n",                        # a bad number
                "# TYPE a histogram\na_bucket{le=\"1\"} 2\na_count 2\n# EOF\n",  # no +Inf
                "# TYPE a histogram\na_bucket{le=\"1\"} 3\na_bucket{le=\"+Inf\"} 2\n"
                "a_count 2\n# EOF\n",                                   # not cumulative
                "# TYPE a gauge\na 1\n# EOF\nb 1\n"]:                   # after EOF
        with pytest.raises(AssertionError):
            check_openmetrics(bad)


PROTOBUF = ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
            "encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,"
            "application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,"
            "*/*;q=0.1")
TYPES = {0: "counter", 1: "gauge", 2: "summary", 3: "untyped", 4: "histogram"}


def varint(buf, i):
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def fields(buf):
    """(field number, value) of a message: ints, doubles, or bytes."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value = struct.unpack("<d", buf[i:i + 8])[0]
            i += 8
        elif wire == 2:
            n, i = varint(buf, i)
            value = buf[i:i + n]
            i += n
            assert len(value) == n, "a field runs past its message"
        else:
            raise AssertionError(f"wire type {wire} of field {field}")
        yield field, value


def timestamp(buf):
    """A google.protobuf.Timestamp as Unix seconds."""
    t = dict(fields(buf))
    return t.get(1, 0) + t.get(2, 0) / 1e9


def unzigzag(v):
    return (v >> 1) ^ -(v & 1)


def native_buckets(spans, deltas):
    """Keys and counts of native buckets from spans and count deltas."""
    out, key, count, d = {}, 0, 0, iter(deltas)
    for n, (offset, length) in enumerate(spans):
        key = offset if n == 0 else key + offset
        for _ in range(length):
            count += next(d)
            assert count >= 0, "a bucket's count below zero"
            out[key] = count
            key += 1
    assert next(d, None) is None, "more deltas than buckets"
    return out


def decode_delimited(body):
    """MetricFamily messages, each as a dict."""
    out, i = [], 0
    spans, deltas = [], []
    while i < len(body):
        n, i = varint(body, i)
        msg = body[i:i + n]
        assert len(msg) == n, "a message runs past the body"
        i += n
        fam = {"name": "", "help": "", "type": 0, "unit": "", "metrics": []}
        for f, v in fields(msg):
            if f == 1:
                fam["name"] = v.decode()
            elif f == 2:
                fam["help"] = v.decode()
            elif f == 3:
                fam["type"] = v
            elif f == 5:
                fam["unit"] = v.decode()
            elif f == 4:
                m = {"labels": [], "value": None, "buckets": [], "count": None, "sum": None,
                     "schema": None, "zero_threshold": None, "zero_count": None, "native": None,
                     "created": None}
                for g, w in fields(v):
                    if g == 1:
                        pair = dict(fields(w))
                        m["labels"].append((pair[1].decode(), pair.get(2, b"").decode()))
                    elif g in (2, 3, 5):  # gauge, counter, untyped: value = 1
                        inner = dict(fields(w))
                        m["value"] = inner.get(1, 0.0)
                        if g == 3 and 3 in inner:  # Counter.created_timestamp
                            m["created"] = timestamp(inner[3])
                    elif g == 7:
                        plain = {1: "count", 2: "sum", 6: "zero_threshold", 7: "zero_count"}
                        for h, x in fields(w):
                            if h in plain:
                                m[plain[h]] = x
                            elif h == 3:
                                b = dict(fields(x))
                                m["buckets"].append((b.get(2, 0.0), b.get(1, 0)))
                            elif h == 15:  # Histogram.created_timestamp
                                m["created"] = timestamp(x)
                            elif h == 5:
                                m["schema"] = unzigzag(x)
                            elif h == 12:
                                span = dict(fields(x))
                                spans.append((unzigzag(span.get(1, 0)), span.get(2, 0)))
                            elif h == 13:
                                j = 0
                                while j < len(x):
                                    d, j = varint(x, j)
                                    deltas.append(unzigzag(d))
                        if spans:  # native buckets: key -> count
                            m["native"] = native_buckets(spans, deltas)
                        spans, deltas = [], []
                fam["metrics"].append(m)
        out.append(fam)
    return out


def get_bytes(port, accept):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=HTTP_S) as r:
        return r.headers, r.read()


def normal(key):
    """A sample key with its le as a number, for comparing formats."""
    name, labels = key
    return name, tuple((k, float(v.replace("Inf", "inf")) if k == "le" else v) for k, v in labels)


def test_protobuf_is_negotiated_and_decodes_to_the_texts_samples(exporter):
    with frozen():
        (headers, body), (_, text) = one_sample(exporter, lambda: get_bytes(exporter, PROTOBUF),
                                                lambda: get(exporter))
    assert headers["Content-Type"] == ("application/vnd.google.protobuf; "
                                       "proto=io.prometheus.client.MetricFamily; encoding=delimited")
    families = decode_delimited(body)
    text_keys, helps, types = set(), {}, {}
    for line in text.splitlines():
        m = re.match(r"^# (HELP|TYPE) (\S+) (.*)$", line)
        if m:
            (helps if m.group(1) == "HELP" else types)[m.group(2)] = m.group(3)
            continue
        m = SAMPLE.match(line)
        text_keys.add(normal((m.group(1), tuple(LABEL_PAIR.findall(m.group(2) or "")))))
    proto_keys = set()
    natives = 0
    for fam in families:
        name, kind = fam["name"], TYPES[fam["type"]]
        assert types[name] == kind, name
        assert fam["help"].replace("\\", "\\\\").replace("\n", "\\n") == helps.get(name, ""), name
        for m in fam["metrics"]:
            labels = tuple(m["labels"])
            if kind == "histogram":
                bounds = [b for b, _ in m["buckets"]]
                counts = [c for _, c in m["buckets"]]
                assert bounds == sorted(bounds) and bounds[-1] == math.inf, name
                assert counts == sorted(counts) and counts[-1] == m["count"], name
                if name in NATIVE_FAMILIES:
                    # Native buckets too, holding the same observations.
                    assert m["native"] is not None and m["schema"] == 3, name
                    assert m["zero_threshold"] == 2 ** -10, name
                    assert m["zero_count"] + sum(m["native"].values()) == m["count"], name
                    natives += m["count"] > 0
                else:
                    assert m["native"] is None, name
                for b, _ in m["buckets"]:
                    proto_keys.add((name + "_bucket", labels + (("le", b),)))
                proto_keys.add((name + "_count", labels))
                proto_keys.add((name + "_sum", labels))
            else:
                proto_keys.add((name, labels))
    requests = {k for k in proto_keys | text_keys if "http_requests" in k[0]}
    assert proto_keys - requests == text_keys - requests
    assert any(f["unit"] == "seconds" for f in families)
    assert natives > 0, "the demo's native histograms have observations"


NATIVE_FAMILIES = {"gym_resources_operation_duration_seconds",
                   "gym_resources_operation_queue_duration_seconds",
                   "gym_concurrency_wait_duration_seconds",
                   "gym_python_event_loop_lag_seconds"}


def start_prometheus(tmp_path, target, features="native-histograms"):
    """Debian's Prometheus with native histograms (or `features`), scraping
    `target` every SCRAPE_S seconds; returns (process, query(expr) -> result
    list); query(expr, path="query_exemplars") asks for the last hour's."""
    import json
    prom_port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"global:\n  scrape_interval: {SCRAPE_S}s\n  scrape_timeout: {SCRAPE_S}s\n"
                   "scrape_configs:\n  - job_name: gym\n    static_configs:\n"
                   f"      - targets: ['127.0.0.1:{target}']\n")
    prom = subprocess.Popen([shutil.which("prometheus") or "/usr/bin/prometheus",
                             f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}",
                             f"--enable-feature={features}"],
                            stderr=open(tmp_path / "prometheus.log", "w"))
    api = f"http://127.0.0.1:{prom_port}/api/v1"

    def query(expr, path="query"):
        params = {"query": expr} if path == "query" else {"metric": expr}
        if path == "query_exemplars":
            params = {"query": expr, "start": time.time() - 3600, "end": time.time() + 60}
        url = f"{api}/{path}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=HTTP_S) as r:
            return json.loads(r.read())["data"]
    return prom, query


def wait_for(tmp_path, what, deadline=PROMETHEUS_WAIT_S):
    end = time.time() + deadline
    while True:
        try:
            got = what()
            if got:
                return got
        except OSError:
            pass
        assert time.time() < end, (tmp_path / "prometheus.log").read_text()[-2000:]
        time.sleep(0.5)


def test_protobuf_carries_each_familys_unit_under_both_name_schemes(exporter):
    """A family's unit is metadata of its row, whatever name it is served
    under: the OpenTelemetry names (escaping=allow-utf-8) drop _seconds from
    the durations' names, not their unit."""
    utf8 = ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
            "encoding=delimited;escaping=allow-utf-8")
    # Two scrapes that serve as many families: one that comes and goes
    # (gym_server_oldest_process_seconds, while a verifier lives) may be in
    # one and not the other.
    for _ in range(10):
        units = {}
        for accept in (PROTOBUF, utf8):
            headers, body = get_bytes(exporter, accept)
            assert ("escaping=allow-utf-8" in headers["Content-Type"]) == (accept == utf8)
            units[accept] = {f["name"]: f["unit"] for f in decode_delimited(body)}
        plain, otel = units[PROTOBUF], units[utf8]
        if len(plain) == len(otel):
            break
    assert len(plain) == len(otel), "no two scrapes in ten served as many families"
    assert plain["gym_concurrency_wait_duration_seconds"] == "seconds"
    assert otel["gym.concurrency.wait_duration"] == "seconds"
    assert otel["gym.resources.operation.duration"] == "seconds"
    for unit in ("seconds", "bytes"):
        assert (sorted(n for n, u in plain.items() if u == unit and "http" not in n) ==
                sorted(n for n, u in plain.items()
                       if n.endswith((f"_{unit}", f"_{unit}_total")) and "http" not in n))
        # The same families carry it, renamed or not.
        assert (len([n for n, u in otel.items() if u == unit and "http" not in n]) ==
                len([n for n, u in plain.items() if u == unit and "http" not in n])), unit


def test_prometheus_with_native_histograms_scrapes_protobuf(exporter, tmp_path):
    """Debian's Prometheus with --enable-feature=native-histograms asks for
    protobuf first: it stores the operation histograms as native histograms
    (Prometheus 2.42 then drops their classic buckets; 2.45 and later keep
    both with scrape_classic_histograms), and names counters' metadata as the
    protobuf families are named (with _total; from OpenMetrics it would be
    without)."""
    with open(EXPORTER_LOG) as f:
        before = sum(1 for line in f if 'msg="scrape"' in line)
    prom, query = start_prometheus(tmp_path, exporter)
    try:
        quantile = ("histogram_quantile(0.99, sum(rate(gym_resources_operation_duration_seconds"
                    f"[{10 * SCRAPE_S}s])))")
        wait_for(tmp_path, lambda: query('up{job="gym"} == 1')["result"] and
                 query(quantile)["result"])
        value = float(query(quantile)["result"][0]["value"][1])
        assert 0 < value <= 1800, value
        stored = query("gym_resources_operation_duration_seconds")["result"]
        assert stored and all("histogram" in r for r in stored), "stored as native histograms"
        assert query("gym_concurrency_admissions_total")["result"], "counters ingested"
        meta = query("gym_concurrency_admissions_total", path="metadata")
        assert meta.get("gym_concurrency_admissions_total", [{}])[0].get("type") == "counter", \
            f"not scraped as protobuf: {meta}"
        # Its scrapes, as the exporter logged them: protobuf only.
        with open(EXPORTER_LOG) as f:
            theirs = [line for line in f if 'msg="scrape"' in line][before:]
        assert theirs and all("format=protobuf" in line for line in theirs), theirs
    finally:
        prom.send_signal(signal.SIGTERM)
        prom.wait()


# A sanitized exporter answers a protobuf scrape in about a tenth of a second
# on an idle machine, several times that beside other sanitized tests: there
# the test scrapes fewer times (each scrape is a chance to catch the race).
# Sanitized, eight writer threads flat out and the exporter share two cores:
# fewer scrapes (each takes seconds under ThreadSanitizer).
TORN_SCRAPES = 40 if SANITIZED else 1000


def test_no_exemplar_is_torn_in_openmetrics_while_writers_observe_flat_out(tmp_path):
    """Two processes of four threads each observe flat out with exemplars
    whose ids say their value (n ms: trace id n repeated, span id n ^ 0x5a)
    while OpenMetrics scrapes run: every exemplar served lies in its bucket
    and has the ids written with its value."""
    registry = tempfile.mkdtemp(prefix=SHM_PREFIX + "torn-", dir="/dev/shm")
    env = dict(os.environ, GYM_METRICS_DIR=registry)
    port = free_port()
    writer = os.path.join(BUILD, "tests", "gym_traced_writer")
    procs = [subprocess.Popen([writer, "--flat"], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline() == "observing\n"
        procs.append(subprocess.Popen(
            [f"{BUILD}/exporter/gym-exporter", f"--registry.dir={registry}",
             f"--web.listen-address=127.0.0.1:{port}"], stderr=subprocess.DEVNULL))
        line = re.compile(r'^gym_resources_operation_duration_seconds_bucket\{.*le="([^"]+)"\} '
                          r'\d+ # \{trace_id="([0-9a-f]{32})",span_id="([0-9a-f]{16})"\} '
                          r'(\S+) (\S+)$', re.M)
        checked = scraped = 0
        # Scrapes counted once answered: a sanitized exporter beside writers
        # observing flat out may take seconds to start.
        deadline = time.time() + HTTP_S
        while scraped < TORN_SCRAPES:
            try:
                _, text = get(port, "application/openmetrics-text;version=1.0.0")
            except OSError:
                assert time.time() < deadline, "the exporter did not answer"
                time.sleep(0.05)  # still starting
                continue
            scraped += 1
            check_openmetrics(text)
            bounds = [float(b) for b in re.findall(
                r'^gym_resources_operation_duration_seconds_bucket\{.*le="([^"]+)"\}', text, re.M)
                if b != "+Inf"]
            for m in line.finditer(text):
                le, trace, span, value = m.group(1), m.group(2), m.group(3), float(m.group(4))
                n = int(trace[:2], 16)
                assert trace == f"{n:02x}" * 16, trace
                assert span == f"{n ^ 0x5a:02x}" * 8, (trace, span)
                assert value == pytest.approx(n / 1000), (trace, value)
                upper = math.inf if le == "+Inf" else float(le)
                lower = max([b for b in bounds if b < upper], default=0.0)
                assert lower < value <= upper, (le, value)
                checked += 1
        assert checked >= TORN_SCRAPES, checked
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(registry, ignore_errors=True)


CPP_TRACE, CPP_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
PY_TRACE, PY_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
PY_WRITER = f"""
import asyncio, sys
import gym_metrics
gym_metrics.declare_server("py_judge", "resources_server")
async def main():
    async with gym_metrics.resources_operation(
            asyncio.Semaphore(1), "judge", "inline", trace_id=int("{PY_TRACE}", 16),
            span_id="{PY_SPAN}") as op:
        await asyncio.sleep(0.02)
        op.outcome = "timeout"
    sem = gym_metrics.MeteredSemaphore(1, "resources_server", "traced_py", server_name="py_judge")
    await sem.acquire()
    waiter = asyncio.ensure_future(sem.acquire(trace_id="{PY_TRACE}", span_id="{PY_SPAN}"))
    await asyncio.sleep(0.02)
    sem.release()
    await waiter
    print("ready", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


@pytest.mark.parametrize("features", ["exemplar-storage", "exemplar-storage,native-histograms"])
def test_prometheus_stores_the_trace_ids_of_a_python_and_a_cpp_writer(tmp_path, features):
    """Debian's Prometheus with exemplar storage (from OpenMetrics, and from
    protobuf with native histograms): /api/v1/query_exemplars gives each
    writer's trace id on its operation's duration histogram, for its server
    and outcome, and on its limit's wait histogram. A sanitized build has no
    Python extension (CMakeLists.txt): the C++ writer's alone there."""
    registry = tempfile.mkdtemp(prefix=SHM_PREFIX + "exemplars-", dir="/dev/shm")
    env = dict(os.environ, GYM_METRICS_DIR=registry,
               PYTHONPATH=os.path.join(BUILD, "python"))
    port = free_port()
    python = os.path.isdir(os.path.join(BUILD, "python", "gym_metrics"))
    procs = [subprocess.Popen([os.path.join(BUILD, "tests", "gym_traced_writer"), "cpp_verifier",
                               CPP_TRACE, CPP_SPAN], env=env, stdout=subprocess.PIPE, text=True)]
    if python:
        procs.append(subprocess.Popen(["/usr/bin/python3", "-c", PY_WRITER], env=env,
                                      stdout=subprocess.PIPE, text=True))
    try:
        for p in procs:
            assert p.stdout.readline() == "ready\n"
        procs.append(subprocess.Popen(
            [f"{BUILD}/exporter/gym-exporter", f"--registry.dir={registry}",
             f"--web.listen-address=127.0.0.1:{port}"], stderr=subprocess.DEVNULL))
        prom, query = start_prometheus(tmp_path, port, features)
        procs.append(prom)
        native = "native" in features
        family = ("gym_resources_operation_duration_seconds" if native
                  else "gym_resources_operation_duration_seconds_bucket")
        wait_family = family.replace("resources_operation", "concurrency_wait")

        def traces(expr):
            return {(tuple(sorted((k, v) for k, v in r["seriesLabels"].items()
                                  if k in ("nemo_gym_server_name",
                                           "nemo_gym_resources_operation_outcome",
                                           "nemo_gym_concurrency_limit_name"))),
                     e["labels"].get("trace_id"), e["labels"].get("span_id"))
                    for r in query(expr, "query_exemplars") for e in r["exemplars"]}

        want_ops = {
            ((("nemo_gym_resources_operation_outcome", "ok"),
              ("nemo_gym_server_name", "cpp_verifier")), CPP_TRACE, CPP_SPAN),
            ((("nemo_gym_resources_operation_outcome", "timeout"),
              ("nemo_gym_server_name", "py_judge")), PY_TRACE, PY_SPAN)}
        if not python:
            want_ops = {w for w in want_ops if w[1] == CPP_TRACE}
        got = wait_for(tmp_path, lambda: want_ops <= traces(family) and traces(family))
        assert want_ops <= got, got
        want_waits = {
            ((("nemo_gym_concurrency_limit_name", "traced_cpp"),
              ("nemo_gym_server_name", "cpp_verifier")), CPP_TRACE, CPP_SPAN),
            ((("nemo_gym_concurrency_limit_name", "traced_py"),
              ("nemo_gym_server_name", "py_judge")), PY_TRACE, PY_SPAN)}
        if not python:
            want_waits = {w for w in want_waits if w[1] == CPP_TRACE}
        got = wait_for(tmp_path, lambda: want_waits <= traces(wait_family) and traces(wait_family))
        assert want_waits <= got, got
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(registry, ignore_errors=True)


FLAT_OUT_SCRAPES = 150 if SANITIZED else 1000


def test_every_protobuf_scrape_adds_up_while_a_writer_observes_flat_out(tmp_path):
    """One C++ thread observes operation durations without pause while the
    exporter is scraped in protobuf a thousand times: in every sample the
    native zero count and buckets add up to the count, and the classic
    buckets end at it (a reader that copied the classic words, then the
    native ones, while the writer added, served buckets above the count)."""
    d = tempfile.mkdtemp(prefix=SHM_PREFIX + "flat-out-", dir="/dev/shm")
    registry = os.path.join(d, "registry")
    procs = []
    try:
        writer = subprocess.Popen([f"{BUILD}/tests/gym_observe_durations", "/dev/null", "-1", "3"],
                                  env=dict(os.environ, GYM_METRICS_DIR=registry),
                                  stdout=subprocess.PIPE, text=True)
        procs.append(writer)
        assert writer.stdout.readline().strip() == "observing"
        port = free_port()
        procs.append(subprocess.Popen(
            [f"{BUILD}/exporter/gym-exporter", f"--registry.dir={registry}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stderr=open(tmp_path / "exporter.log", "w")))
        counts = []
        deadline = time.time() + 60
        while len(counts) < FLAT_OUT_SCRAPES:
            try:
                _, body = get_bytes(port, PROTOBUF)
            except OSError:
                assert time.time() < deadline, "the exporter did not answer"
                time.sleep(0.1)
                continue
            for fam in decode_delimited(body):
                if fam["name"] != "gym_resources_operation_duration_seconds":
                    continue
                for m in fam["metrics"]:
                    assert m["zero_count"] + sum(m["native"].values()) == m["count"], \
                        f"scrape {len(counts)}: native buckets do not add up to the count"
                    assert m["buckets"][-1][1] == m["count"], f"scrape {len(counts)}"
                    counts.append(m["count"])
        assert counts == sorted(counts), "a count fell"
        assert counts[-1] > counts[0], "the writer observed while scraped"
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


NATIVE_BASE = 2 ** (1 / 8)  # schema 3: the ratio of a bucket's bounds


def test_native_histogram_quantiles_are_within_the_schema_bound_of_the_observed(tmp_path):
    """A writer observes 20,000 known durations (log-normal, median 50 ms)
    into the operation histogram and logs them; Prometheus scrapes the
    exporter beside it as protobuf and stores a native histogram, whose
    count is the writer's, and whose histogram_quantile for 0.5, 0.9, 0.99
    and 0.999 lies within the schema's bound (a factor 2^(1/8)) of the
    quantile of the logged observations (the value at rank ceil(q*n))."""
    d = tempfile.mkdtemp(prefix=SHM_PREFIX + "native-", dir="/dev/shm")
    registry = os.path.join(d, "registry")
    log = tmp_path / "observed.txt"
    n = 20000
    procs = []
    prom = None
    try:
        writer = subprocess.Popen([f"{BUILD}/tests/gym_observe_durations", str(log), str(n), "7"],
                                  env=dict(os.environ, GYM_METRICS_DIR=registry),
                                  stdout=subprocess.PIPE, text=True)
        procs.append(writer)
        assert writer.stdout.readline().strip() == "observed"
        observed = sorted(float(x) for x in log.read_text().split())
        assert len(observed) == n
        port = free_port()
        procs.append(subprocess.Popen(
            [f"{BUILD}/exporter/gym-exporter", f"--registry.dir={registry}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stderr=open(tmp_path / "exporter.log", "w")))
        prom, query = start_prometheus(tmp_path, port)
        series = "gym_resources_operation_duration_seconds"
        count = wait_for(tmp_path, lambda: query(f"histogram_count({series})")["result"])
        assert float(count[0]["value"][1]) == n
        for q in (0.5, 0.9, 0.99, 0.999):
            got = float(query(f"histogram_quantile({q}, {series})")["result"][0]["value"][1])
            true = observed[math.ceil(q * n) - 1]
            print(f"q={q}: native {got:.6f} s, observed {true:.6f} s, ratio {got / true:.4f}")
            assert true / NATIVE_BASE * (1 - 1e-9) <= got <= true * NATIVE_BASE * (1 + 1e-9), \
                (q, got, true)
    finally:
        if prom is not None:
            prom.send_signal(signal.SIGTERM)
            prom.wait()
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait()
        shutil.rmtree(d, ignore_errors=True)
