"""deploy/kubernetes/, checked without a cluster: every manifest parses; the
built-in kinds are validated against the Kubernetes API's own models
(Debian's python3-kubernetes, generated from the API's OpenAPI schema: every
field known, of its type, required ones present); the Prometheus Operator's
PodMonitor and PrometheusRule, KubeRay's RayCluster (its pod templates
against the API's models) and the OpenTelemetry Operator's collector (its
Prometheus receiver's configuration checked by promtool), against the
fields of theirs we use; the
PrometheusRule is what config/rules/ holds; the DaemonSet, the sidecar and
the KubeRay workers keep the settings their comments promise."""
import glob
import os
import re
import subprocess

import jsonschema
import kubernetes.client as k8s
import pytest
import yaml

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(SOURCE, "deploy", "kubernetes")
MODELS = {("v1", "Namespace"): "V1Namespace", ("v1", "Pod"): "V1Pod",
          ("v1", "ConfigMap"): "V1ConfigMap",
          ("apps/v1", "DaemonSet"): "V1DaemonSet"}


def problems(value, type_name, path="$"):
    """Where `value` does not fit the API model `type_name`: unknown fields,
    wrong types. (Required fields: the models' own validation, below.)"""
    out = []
    if type_name in ("str", "int", "bool", "float"):
        types = {"str": str, "int": int, "bool": bool, "float": (int, float)}[type_name]
        if not isinstance(value, types) or (type_name == "int" and isinstance(value, bool)):
            out.append(f"{path}: {value!r} is not {type_name}")
        return out
    if type_name == "object":
        return out
    m = re.fullmatch(r"list\[(.+)\]", type_name)
    if m:
        if not isinstance(value, list):
            return [f"{path}: not a list"]
        for i, v in enumerate(value):
            out += problems(v, m.group(1), f"{path}[{i}]")
        return out
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        if not isinstance(value, dict):
            return [f"{path}: not a mapping"]
        for key, v in value.items():
            out += problems(v, m.group(1), f"{path}.{key}")
        return out
    model = getattr(k8s, type_name)
    if not isinstance(value, dict):
        return [f"{path}: not a {type_name}"]
    by_json = {json: attr for attr, json in model.attribute_map.items()}
    for key, v in value.items():
        if key not in by_json:
            out.append(f"{path}.{key}: no such field in {type_name}")
            continue
        t = model.openapi_types[by_json[key]]
        # IntOrString fields (ports of probes) are "object" in the models.
        out += problems(v, t, f"{path}.{key}")
    return out


def validate_builtin(doc):
    name = MODELS[(doc["apiVersion"], doc["kind"])]
    errors = problems(doc, name)
    try:  # required fields, as the client validates them
        k8s.ApiClient()._ApiClient__deserialize(doc, name)
    except ValueError as e:
        errors.append(str(e))
    return errors


def manifests():
    out = []
    for path in sorted(glob.glob(os.path.join(DEPLOY, "**", "*.yaml"), recursive=True)):
        with open(path) as f:
            out += [(os.path.relpath(path, DEPLOY), d) for d in yaml.safe_load_all(f) if d]
    return out


def test_the_validator_refuses_unknown_fields_wrong_types_and_missing_containers():
    ds = next(d for p, d in manifests() if d["kind"] == "DaemonSet")
    assert validate_builtin(ds) == []
    bad = yaml.safe_load(yaml.safe_dump(ds))
    c = bad["spec"]["template"]["spec"]["containers"][0]
    c["securityContext"]["readOnlyRootFileSystem"] = True  # a typo of a real field
    c["ports"][0]["containerPort"] = "9478"
    errors = validate_builtin(bad)
    assert any("readOnlyRootFileSystem: no such field in V1SecurityContext" in e for e in errors)
    assert any("containerPort: '9478' is not int" in e for e in errors)
    del bad["spec"]["template"]["spec"]["containers"]
    assert any("containers" in e for e in validate_builtin(bad))


def validate_raycluster(doc):
    """KubeRay's RayCluster (ray.io/v1): the fields we use, strictly, and
    every pod template a valid PodTemplateSpec of the Kubernetes API."""
    jsonschema.validate(doc, RAYCLUSTER_SCHEMA)
    groups = [doc["spec"]["headGroupSpec"], *doc["spec"]["workerGroupSpecs"]]
    errors = []
    for g in groups:
        errors += problems(g["template"], "V1PodTemplateSpec")
        try:
            k8s.ApiClient()._ApiClient__deserialize(g["template"], "V1PodTemplateSpec")
        except ValueError as e:
            errors.append(str(e))
    return errors


@pytest.mark.parametrize("path,doc", manifests(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_manifest_fits_the_api(path, doc):
    if doc["apiVersion"].startswith("monitoring.coreos.com/"):
        jsonschema.validate(doc, OPERATOR_SCHEMAS[doc["kind"]])
    elif doc["apiVersion"] == "ray.io/v1":
        assert validate_raycluster(doc) == [], path
    elif doc["apiVersion"] == "opentelemetry.io/v1beta1":
        jsonschema.validate(doc, OTEL_SCHEMA)
    else:
        assert validate_builtin(doc) == [], path


def test_the_otel_collector_scrapes_per_node_what_prometheus_would_accept(tmp_path):
    (otel,) = [d for p, d in manifests() if d["kind"] == "OpenTelemetryCollector"]
    spec = otel["spec"]
    # Per-node allocation exists only for a collector on every node.
    assert spec["mode"] == "daemonset"
    assert spec["targetAllocator"]["allocationStrategy"] == "per-node"
    # The PodMonitors it takes are the node one's.
    node_pm = next(d for p, d in manifests() if p == "node/podmonitor.yaml")
    selector = spec["targetAllocator"]["prometheusCR"]["podMonitorSelector"]["matchLabels"]
    assert selector.items() <= node_pm["metadata"]["labels"].items()
    # Its receiver's configuration is a Prometheus one: promtool checks it.
    prom = tmp_path / "prometheus.yml"
    prom.write_text(yaml.safe_dump(spec["config"]["receivers"]["prometheus"]["config"]))
    r = subprocess.run(["promtool", "check", "config", str(prom)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    pipeline = spec["config"]["service"]["pipelines"]["metrics"]
    assert pipeline["receivers"] == ["prometheus"]
    assert set(pipeline["exporters"]) <= set(spec["config"]["exporters"])


def test_the_kuberay_workers_run_the_sidecar_that_their_podmonitor_scrapes():
    (ray,) = [d for p, d in manifests() if d["kind"] == "RayCluster"]
    (worker,) = ray["spec"]["workerGroupSpecs"]
    pod = worker["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    by_name = {c["name"]: c for c in pod["containers"]}
    exporter = by_name["gym-exporter"]
    registry = next(a.split("=", 1)[1] for a in exporter["args"]
                    if a.startswith("--registry.dir="))
    others = [c for n, c in by_name.items() if n != "gym-exporter"]
    assert all({"name": "GYM_METRICS_DIR", "value": registry} in c["env"] for c in others)
    monitors = [d for p, d in manifests()
                if d["kind"] == "PodMonitor" and p.startswith("kuberay/")]
    (pm,) = monitors
    assert pm["spec"]["selector"]["matchLabels"].items() <= \
        worker["template"]["metadata"]["labels"].items()
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep["port"] in [p["name"] for p in exporter["ports"]]
    keep = ep["relabelings"][0]
    assert keep["sourceLabels"] == ["__meta_kubernetes_pod_label_ray_io_cluster"]
    assert keep["action"] == "keep" and keep["regex"] == ".+"
    # No run or cluster label onto every series: gym_run_info says it.
    assert all(r.get("targetLabel") in (None, "instance") for r in ep["relabelings"])


# The Prometheus Operator's kinds (monitoring.coreos.com/v1), the fields we
# use, strictly: what its CRDs say of them.
_META = {"type": "object", "required": ["name", "namespace"],
         "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                        "labels": {"type": "object",
                                   "additionalProperties": {"type": "string"}}},
         "additionalProperties": False}
_RULE = {"type": "object", "required": ["expr"], "additionalProperties": False,
         "properties": {"record": {"type": "string"}, "alert": {"type": "string"},
                        "expr": {"type": ["string", "integer"]}, "for": {"type": "string"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "annotations": {"type": "object",
                                        "additionalProperties": {"type": "string"}}},
         "oneOf": [{"required": ["record"]}, {"required": ["alert"]}]}
_RELABEL = {"type": "object", "additionalProperties": False,
            "properties": {"sourceLabels": {"type": "array", "items": {"type": "string"}},
                           "targetLabel": {"type": "string"}, "regex": {"type": "string"},
                           "replacement": {"type": "string"},
                           "action": {"enum": ["replace", "keep", "drop", "labelmap",
                                              "labeldrop", "labelkeep", "hashmod"]}}}
_GROUP = {"type": "object", "required": ["rayStartParams", "template"],
          "properties": {"rayStartParams": {"type": "object"}, "template": {"type": "object"}}}
RAYCLUSTER_SCHEMA = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "ray.io/v1"}, "kind": {"const": "RayCluster"},
        "metadata": _META,
        "spec": {"type": "object", "required": ["headGroupSpec"], "additionalProperties": False,
                 "properties": {
                     "rayVersion": {"type": "string"},
                     "headGroupSpec": {**_GROUP, "additionalProperties": False},
                     "workerGroupSpecs": {"type": "array", "items": {
                         **_GROUP, "required": ["groupName", "rayStartParams", "template"],
                         "additionalProperties": False,
                         "properties": {**_GROUP["properties"], "groupName": {"type": "string"},
                                        "replicas": {"type": "integer"},
                                        "minReplicas": {"type": "integer"},
                                        "maxReplicas": {"type": "integer"}}}}}}}}
OTEL_SCHEMA = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "opentelemetry.io/v1beta1"},
        "kind": {"const": "OpenTelemetryCollector"}, "metadata": _META,
        "spec": {"type": "object", "required": ["mode", "config"], "additionalProperties": False,
                 "properties": {
                     "mode": {"enum": ["daemonset", "deployment", "statefulset", "sidecar"]},
                     "targetAllocator": {
                         "type": "object", "additionalProperties": False,
                         "properties": {
                             "enabled": {"type": "boolean"},
                             "allocationStrategy": {"enum": ["least-weighted",
                                                             "consistent-hashing",
                                                             "per-node"]},
                             "prometheusCR": {
                                 "type": "object", "additionalProperties": False,
                                 "properties": {
                                     "enabled": {"type": "boolean"},
                                     "scrapeInterval": {"type": "string"},
                                     "podMonitorSelector": {"type": "object"}}}}},
                     "config": {"type": "object",
                                "required": ["receivers", "exporters", "service"]}}}}}
OPERATOR_SCHEMAS = {
    "PodMonitor": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PodMonitor"},
            "metadata": _META,
            "spec": {"type": "object", "required": ["selector", "podMetricsEndpoints"],
                     "additionalProperties": False,
                     "properties": {
                         "selector": {"type": "object", "additionalProperties": False,
                                      "properties": {"matchLabels": {"type": "object"}}},
                         "podMetricsEndpoints": {"type": "array", "items": {
                             "type": "object", "additionalProperties": False,
                             "properties": {"port": {"type": "string"},
                                            "path": {"type": "string"},
                                            "interval": {"type": "string",
                                                         "pattern": "^[0-9]+(ms|s|m|h)$"},
                                            "relabelings": {"type": "array",
                                                            "items": _RELABEL}}}}}}}},
    "PrometheusRule": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"}, "metadata": _META,
            "spec": {"type": "object", "required": ["groups"], "additionalProperties": False,
                     "properties": {"groups": {"type": "array", "items": {
                         "type": "object", "required": ["name", "rules"],
                         "additionalProperties": False,
                         "properties": {"name": {"type": "string"},
                                        "interval": {"type": "string"},
                                        "rules": {"type": "array", "items": _RULE}}}}}}}},
}


def test_the_prometheusrule_is_what_config_rules_holds():
    # Both are rendered from mixin/ (test_mixin.py checks they are up to
    # date); here, that they hold the same groups.
    groups = []
    for name in ("gym-recording.yml", "gym-alerts.yml"):
        with open(os.path.join(SOURCE, "config", "rules", name)) as f:
            groups += yaml.safe_load(f)["groups"]
    with open(os.path.join(DEPLOY, "node", "prometheusrule.yaml")) as f:
        assert yaml.safe_load(f)["spec"]["groups"] == groups
    names = [r.get("alert") for g in groups for r in g["rules"]]
    assert "GymEventLoopBlocked" in names and "GymExporterDown" in names


def node_daemonset():
    return next(d for p, d in manifests() if d["kind"] == "DaemonSet")


def test_the_daemonset_sees_the_nodes_processes_and_needs_no_privilege():
    ds = node_daemonset()
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod.get("hostNetwork") is not True and pod.get("hostIPC") is not True
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged") is not True and sc["capabilities"] == {"drop": ["ALL"]}
    assert "add" not in sc["capabilities"]
    # Requests and a memory limit, from the measured footprint.
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    assert c["resources"]["limits"]["memory"]
    # The registry: the node's tmpfs path the Gym pods mount, where the
    # exporter's flag says.
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert set(vols) == set(mounts) == {"registry", "cgroup", "config"}
    assert vols["registry"]["hostPath"]["path"].startswith("/dev/shm/")
    assert f"--registry.dir={mounts['registry']['mountPath']}" in c["args"]
    assert not mounts["registry"].get("readOnly")  # its totals files are written there
    # The node's cgroup tree, read-only, where the configuration says.
    assert vols["cgroup"]["hostPath"]["path"] == "/sys/fs/cgroup"
    assert mounts["cgroup"]["readOnly"] is True and mounts["config"]["readOnly"] is True
    (cm,) = [d for p, d in manifests() if d["kind"] == "ConfigMap"]
    assert vols["config"]["configMap"]["name"] == cm["metadata"]["name"]
    (file,) = cm["data"]
    assert f"--config.file={mounts['config']['mountPath']}/{file}" in c["args"]
    servers = yaml.safe_load(cm["data"][file])["servers"]
    for key in ("cgroup_v2_mount", "cgroup_v1_memory_mount", "cgroup_v1_cpu_mount"):
        assert servers[key].startswith(mounts["cgroup"]["mountPath"]), key
    assert c["ports"][0]["containerPort"] == 9478 and c["ports"][0]["name"] == "metrics"
    assert c["readinessProbe"]["httpGet"]["path"] == "/-/ready"


def test_the_sidecar_shares_the_registry_and_the_process_namespace():
    pod = next(d for p, d in manifests() if d["kind"] == "Pod")["spec"]
    assert pod["shareProcessNamespace"] is True
    (vol,) = pod["volumes"]
    assert vol["emptyDir"]["medium"] == "Memory" and vol["emptyDir"]["sizeLimit"]
    gym, exporter = pod["containers"]
    env = {e["name"]: e["value"] for e in gym["env"]}
    assert f"--registry.dir={env['GYM_METRICS_DIR']}" in exporter["args"]
    for c in (gym, exporter):
        assert {(m["name"], m["mountPath"]) for m in c["volumeMounts"]} == \
            {(vol["name"], env["GYM_METRICS_DIR"])}
    assert exporter["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_podmonitor_selects_the_daemonsets_pods_on_its_port():
    pm = next(d for p, d in manifests() if d["kind"] == "PodMonitor" and p.startswith("node/"))
    ds = node_daemonset()
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for p in ds["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= ports
    assert pm["metadata"]["namespace"] == ds["metadata"]["namespace"]
