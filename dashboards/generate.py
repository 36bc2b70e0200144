#!/usr/bin/env python3
"""Writes the Grafana dashboards (dashboards/*.json) from one description, so
that all three share their variables and conventions: schemaVersion 39, a
stable uid, a datasource variable and job and instance variables, a unit on
every panel, $__rate_interval in every rate, job and instance matchers in
every query. Run it after changing a panel: python3 dashboards/generate.py
"""
import json
import os

# Every selector matches the job and instance variables (BASE), and each
# dashboard's own variables (SEL is set before each dashboard below).
BASE = 'job=~"$job", instance=~"$instance"'
SEL = BASE
LIMIT = "nemo_gym_concurrency_component, nemo_gym_concurrency_limit_name, nemo_gym_server_name"
OP = "nemo_gym_resources_operation, nemo_gym_resources_executor"
SERVER = "nemo_gym_server_name, nemo_gym_server_type"


def label_variable(name, label, metric, var_label):
    """A multi-value variable over the values of `var_label` on `metric` for
    the selected jobs and hosts; "All" matches series without the label too."""
    ds = {"type": "prometheus", "uid": "${datasource}"}
    q = f'label_values({metric}{{{BASE}}}, {var_label})'
    return {"name": name, "label": label, "type": "query", "datasource": ds,
            "query": {"query": q, "refId": name}, "definition": q,
            "multi": True, "includeAll": True, "allValue": ".*", "refresh": 2,
            "sort": 1, "current": {}, "hide": 0}


def variables(extra=()):
    ds = {"type": "prometheus", "uid": "${datasource}"}
    return [
        {"name": "datasource", "label": "Data source", "type": "datasource",
         "query": "prometheus", "current": {}, "hide": 0},
        {"name": "job", "label": "Job", "type": "query", "datasource": ds,
         "query": {"query": "label_values(gym_exporter_build_info, job)", "refId": "job"},
         "definition": "label_values(gym_exporter_build_info, job)",
         "multi": True, "includeAll": True, "refresh": 2, "current": {}, "hide": 0},
        {"name": "instance", "label": "Instance", "type": "query", "datasource": ds,
         "query": {"query": 'label_values(gym_exporter_build_info{job=~"$job"}, instance)',
                   "refId": "instance"},
         "definition": 'label_values(gym_exporter_build_info{job=~"$job"}, instance)',
         "multi": True, "includeAll": True, "refresh": 2, "current": {}, "hide": 0},
    ] + list(extra)


def panel(title, unit, targets, kind="timeseries", description="", stack=False):
    p = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
        "targets": [],
    }
    if kind == "timeseries":
        p["fieldConfig"]["defaults"]["custom"] = {
            "stacking": {"mode": "normal" if stack else "none"}}
        p["options"] = {"legend": {"displayMode": "table", "placement": "bottom",
                                   "calcs": ["lastNotNull", "max"]},
                        "tooltip": {"mode": "multi"}}
    if kind == "heatmap":
        p["options"] = {"calculate": False, "yAxis": {"unit": unit},
                        "cellGap": 1, "color": {"scheme": "Oranges", "mode": "scheme"}}
    for i, (expr, legend) in enumerate(targets):
        t = {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
             "datasource": {"type": "prometheus", "uid": "${datasource}"}}
        if kind == "heatmap":
            t["format"] = "heatmap"
        p["targets"].append(t)
    return p


def dashboard(uid, title, description, panels, extra_variables=()):
    placed = []
    for i, p in enumerate(panels):
        p = dict(p, id=i + 1, gridPos={"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8})
        placed.append(p)
    return {
        "uid": uid, "title": title, "description": description,
        "tags": ["gym", "nemo-gym"], "schemaVersion": 39, "version": 1,
        "editable": True, "graphTooltip": 1, "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"}, "timezone": "",
        "templating": {"list": variables(extra_variables)}, "annotations": {"list": []},
        # The other Gym dashboards, with the same time range and variables.
        "links": [{"type": "dashboards", "tags": ["gym"], "asDropdown": True,
                   "title": "Gym dashboards", "includeVars": True, "keepTime": True}],
        "panels": placed,
    }


def rate(metric, extra=""):
    return f'rate({metric}{{{SEL}{extra}}}[$__rate_interval])'


SEL = (BASE + ', nemo_gym_concurrency_component=~"$component", '
       'nemo_gym_concurrency_limit_name=~"$limit", nemo_gym_server_name=~"$server"')
CONCURRENCY = dashboard(
    "gym-concurrency", "Gym / Concurrency limits",
    "Every concurrency limit: its slots, who holds them and who waits.",
    [
        panel("Limit, active and queued", "short", [
            (f"sum by ({LIMIT}) (gym_concurrency_limit{{{SEL}}})",
             "limit {{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}"),
            (f"sum by ({LIMIT}) (gym_concurrency_active{{{SEL}}})",
             "active {{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}"),
            (f"sum by ({LIMIT}) (gym_concurrency_queue_depth{{{SEL}}})",
             "queued {{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}"),
        ], description="Summed over the selected hosts."),
        panel("Saturation", "percentunit", [
            (f"sum by ({LIMIT}) (gym_concurrency_active{{{SEL}}}) / "
             f"sum by ({LIMIT}) (gym_concurrency_limit{{{SEL}}})",
             "{{nemo_gym_concurrency_component}}/{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}"),
        ], description="Share of slots held; 100% with a queue means work waits on this limit."),
        panel("Most saturated limits, per host", "percentunit", [
            (f"topk(5, sum by (instance, {LIMIT}) (gym_concurrency_active{{{SEL}}}) / "
             f"sum by (instance, {LIMIT}) (gym_concurrency_limit{{{SEL}}}))",
             "{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}"),
        ], description="The five limits with the largest share of slots held on one host: "
                       "a limit full on one host can hide in a sum over many."),
        panel("Longest queues, per host", "short", [
            (f"topk(5, sum by (instance, {LIMIT}) (gym_concurrency_queue_depth{{{SEL}}}))",
             "{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}"),
        ]),
        panel("Queue depth", "short", [
            (f"sum by ({LIMIT}) (gym_concurrency_queue_depth{{{SEL}}})",
             "{{nemo_gym_concurrency_component}}/{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}"),
        ], stack=True),
        panel("Free slots", "short", [
            (f"sum by ({LIMIT}) (gym_concurrency_available{{{SEL}}})",
             "{{nemo_gym_concurrency_component}}/{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}"),
        ]),
        panel("Oldest hold", "s", [
            (f"max by (instance, {LIMIT}) (gym_concurrency_oldest_hold_seconds{{{SEL}}})",
             "{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}"),
        ], description="How long the longest-held slot of each limit has been held, per host. "
                       "A line that keeps climbing while admissions stay flat is a wedged holder."),
        panel("Oldest wait", "s", [
            (f"max by (instance, {LIMIT}) (gym_concurrency_oldest_wait_seconds{{{SEL}}})",
             "{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}"),
        ], description="How long the longest-waiting caller of each limit has waited, per host."),
        panel("Admissions", "ops", [
            (f"sum by ({LIMIT}) ({rate('gym_concurrency_admissions_total')})",
             "{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}"),
        ], description="Callers that got a slot, per second: the flow through each limit."),
        panel("Wait p99", "s", [
            (f"histogram_quantile(0.99, sum by (le, {LIMIT}) "
             f"({rate('gym_concurrency_wait_duration_seconds_bucket')}))",
             "{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}"),
        ], description="99th percentile of the waits for a slot, timed out and cancelled ones "
                       "included."),
        panel("Admission timeouts", "ops", [
            (f"sum by ({LIMIT}) ({rate('gym_concurrency_admission_timeouts_total')})",
             "{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}"),
        ], description="Waits that ran out of the admission timeout, per second."),
        panel("Admission cancellations", "ops", [
            (f"sum by ({LIMIT}) ({rate('gym_concurrency_admission_cancelled_total')})",
             "{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}"),
        ], description="Waits cancelled before a slot was free, per second."),
    ],
    [label_variable("component", "Component", "gym_concurrency_limit",
                    "nemo_gym_concurrency_component"),
     label_variable("limit", "Limit", "gym_concurrency_limit", "nemo_gym_concurrency_limit_name"),
     label_variable("server", "Server", "gym_concurrency_limit", "nemo_gym_server_name")])


def quantiles(family):
    return [(f"histogram_quantile({q}, sum by (le, {OP}) ({rate(family + '_bucket')}))",
             f"p{int(q * 100)} {{{{nemo_gym_resources_operation}}}} {{{{nemo_gym_resources_executor}}}}")
            for q in (0.5, 0.9, 0.99)]


SEL = (BASE + ', nemo_gym_resources_operation=~"$operation", '
       'nemo_gym_server_name=~"$server"')
OPERATIONS = dashboard(
    "gym-resources-operations", "Gym / Resources operations",
    "Bounded work of resources servers: how long it queued, ran, and how it ended.",
    [
        panel("Queue time quantiles", "s", quantiles("gym_resources_operation_queue_duration_seconds")),
        panel("Run time quantiles", "s", quantiles("gym_resources_operation_duration_seconds")),
        panel("Queue time", "s", [
            (f"sum by (le) ({rate('gym_resources_operation_queue_duration_seconds_bucket')})",
             "{{le}}")], kind="heatmap"),
        panel("Run time", "s", [
            (f"sum by (le) ({rate('gym_resources_operation_duration_seconds_bucket')})",
             "{{le}}")], kind="heatmap"),
        panel("Outcomes", "ops", [
            (f"sum by (nemo_gym_resources_operation_outcome) "
             f"({rate('gym_resources_operation_duration_seconds_count')})",
             "{{nemo_gym_resources_operation_outcome}}")], stack=True,
            description="Finished operations per second, by outcome."),
        panel("Oldest queued and running", "s", [
            (f"max by (instance, {OP}) (gym_resources_operation_oldest_queued_seconds{{{SEL}}})",
             "queued {{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}} {{instance}}"),
            (f"max by (instance, {OP}) (gym_resources_operation_oldest_active_seconds{{{SEL}}})",
             "running {{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}} {{instance}}"),
        ], description="Age of the longest-waiting and the longest-running operation, per host: "
                       "a stuck operation shows here long before it records a duration."),
        panel("Slowest operations (p99 run time)", "s", [
            (f"topk(5, histogram_quantile(0.99, sum by (le, {OP}, nemo_gym_server_name) "
             f"({rate('gym_resources_operation_duration_seconds_bucket')})))",
             "{{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}} "
             "{{nemo_gym_server_name}}"),
        ], description="The five operations with the longest 99th percentile run time."),
        panel("Queued and running", "short", [
            (f"sum by ({OP}) (gym_resources_operation_queued{{{SEL}}})",
             "queued {{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}}"),
            (f"sum by ({OP}) (gym_resources_operation_active{{{SEL}}})",
             "running {{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}}"),
        ]),
    ],
    [label_variable("operation", "Operation", "gym_resources_operation_queued",
                    "nemo_gym_resources_operation"),
     label_variable("server", "Server", "gym_resources_operation_queued", "nemo_gym_server_name")])

SEL = BASE + ', nemo_gym_server_name=~"$server"'
HOST = BASE  # host-wide series have no server
MEMORY = dashboard(
    "gym-memory", "Gym / Memory",
    "Memory of every Gym server's whole process tree, and of the host.",
    [
        panel("Server RSS", "bytes", [
            (f'sum by ({SERVER}) (gym_server_memory_usage_bytes{{{SEL}, memory_type="rss"}})',
             "{{nemo_gym_server_name}}"),
            (f'max by ({SERVER}) (gym_server_memory_sampled_peak_bytes{{{SEL}, memory_type="rss"}})',
             "peak {{nemo_gym_server_name}}"),
        ]),
        panel("Server PSS", "bytes", [
            (f'sum by ({SERVER}) (gym_server_memory_usage_bytes{{{SEL}, memory_type="pss"}})',
             "{{nemo_gym_server_name}}"),
            (f'max by ({SERVER}) (gym_server_memory_sampled_peak_bytes{{{SEL}, memory_type="pss"}})',
             "peak {{nemo_gym_server_name}}"),
        ], description="Proportional set size: shared pages split between the processes sharing them."),
        panel("Largest servers (RSS), per host", "bytes", [
            (f'topk(5, max by (instance, {SERVER}) '
             f'(gym_server_memory_usage_bytes{{{SEL}, memory_type="rss"}}))',
             "{{nemo_gym_server_name}} {{instance}}"),
        ]),
        panel("CPU per server", "percentunit", [
            (f"sum by (instance, {SERVER}) ({rate('gym_server_cpu_seconds_total')})",
             "{{nemo_gym_server_name}} {{instance}}"),
        ], description="Cores used by each server's process tree, reaped children included."),
        panel("Processes per server", "short", [
            (f"sum by ({SERVER}) (gym_server_processes{{{SEL}}})", "{{nemo_gym_server_name}}")]),
        panel("Host memory", "bytes", [
            (f"sum by (instance) (gym_host_memory_usage_bytes{{{HOST}}})", "used {{instance}}"),
            (f"sum by (instance) (gym_host_memory_available_bytes{{{HOST}}})", "available {{instance}}"),
            (f"sum by (instance) (gym_host_memory_total_bytes{{{HOST}}})", "total {{instance}}"),
            (f"max by (instance) (gym_host_memory_sampled_peak_bytes{{{HOST}}})", "peak used {{instance}}"),
        ]),
        panel("Servers' share of host memory", "percentunit", [
            (f"max by (instance, {SERVER}) (gym_server_memory_usage_bytes{{{SEL}, memory_type=\"rss\"}}) "
             f"/ on (instance) group_left sum by (instance) (gym_host_memory_total_bytes{{{HOST}}})",
             "{{nemo_gym_server_name}} {{instance}}")]),
        panel("Servers' cgroups", "bytes", [
            (f"sum by (instance, {SERVER}) (gym_server_cgroup_memory_usage_bytes{{{SEL}}})",
             "{{nemo_gym_server_name}} {{instance}}"),
            (f"max by (instance, {SERVER}) (gym_server_cgroup_memory_peak_bytes{{{SEL}}})",
             "peak {{nemo_gym_server_name}} {{instance}}"),
            (f"max by (instance, {SERVER}) (gym_server_cgroup_memory_limit_bytes{{{SEL}}})",
             "limit {{nemo_gym_server_name}} {{instance}}"),
        ], description="Memory charged to the cgroup of each server that has one of its own "
                       "(page cache included), its peak and its limit."),
        panel("GPU memory by server, per GPU", "bytes", [
            (f"sum by (instance, {SERVER}, gpu) (gym_server_gpu_memory_bytes{{{SEL}}})",
             "{{nemo_gym_server_name}} GPU {{gpu}} {{instance}}"),
            (f"max by (instance, {SERVER}, gpu) (gym_server_gpu_memory_sampled_peak_bytes{{{SEL}}})",
             "peak {{nemo_gym_server_name}} GPU {{gpu}} {{instance}}"),
        ], description="GPU memory (NVML) held by each server's processes on each GPU, and its "
                       "sampled peak."),
        panel("GPU utilization by server, per GPU", "percentunit", [
            (f"max by (instance, {SERVER}, gpu) (gym_server_gpu_utilization_ratio{{{SEL}}})",
             "{{nemo_gym_server_name}} GPU {{gpu}} {{instance}}"),
        ], description="Share of time a kernel of each server's processes ran on each GPU "
                       "(NVML's per-process SM utilization)."),
        panel("GPUs: used, unattributed, total", "bytes", [
            (f"sum by (instance, gpu) (gym_gpu_memory_used_bytes{{{HOST}}})",
             "used GPU {{gpu}} {{instance}}"),
            (f"sum by (instance, gpu) (gym_gpu_memory_unattributed_bytes{{{HOST}}})",
             "no server's GPU {{gpu}} {{instance}}"),
            (f"sum by (instance, gpu) (gym_gpu_memory_total_bytes{{{HOST}}})",
             "total GPU {{gpu}} {{instance}}"),
        ], description="Memory in use on each GPU; of it, what no known server holds (other "
                       "processes, the driver); and the GPU's memory."),
        panel("Exits and OOM kills", "short", [
            (f"sum by (instance, {SERVER}, reason) "
             f"(increase(gym_server_exits_total{{{SEL}}}[$__rate_interval]))",
             "{{nemo_gym_server_name}} {{reason}} {{instance}}"),
            (f"sum by (instance, {SERVER}) "
             f"(increase(gym_server_cgroup_oom_kills_total{{{SEL}}}[$__rate_interval]))",
             "OOM kills in {{nemo_gym_server_name}}'s cgroup {{instance}}"),
            (f"sum by (instance) (increase(gym_host_oom_kills_total{{{HOST}}}[$__rate_interval]))",
             "OOM kills on {{instance}}"),
        ], description="Server root processes that exited (oom_kill: killed by the OOM killer), "
                       "OOM kills in servers' own cgroups, and on the whole host."),
        panel("Which server's event loop is blocked, and for how long", "s", [
            (f"max by (instance, nemo_gym_server_name) "
             f"(gym_python_event_loop_blocked_seconds{{{SEL}}})",
             "{{nemo_gym_server_name}} {{instance}}"),
        ], description="How long each Python server's event loop has not run its heartbeat, now "
                       "(0: it runs): a synchronous call or a CPU-bound verifier run inline "
                       "holds the loop, and nothing else in that server runs meanwhile."),
        panel("Event loop lag (p99)", "s", [
            (f"histogram_quantile(0.99, sum by (le, instance, nemo_gym_server_name) "
             f"({rate('gym_python_event_loop_lag_seconds_bucket')}))",
             "{{nemo_gym_server_name}} {{instance}}"),
        ], description="How late each server's loop ran a callback that was due: a loop that is "
                       "busy, not blocked, is late by milliseconds."),
        panel("Event loop tasks and threads", "short", [
            (f"sum by (instance, nemo_gym_server_name) (gym_python_event_loop_tasks{{{SEL}}})",
             "tasks {{nemo_gym_server_name}} {{instance}}"),
            (f"sum by (instance, nemo_gym_server_name) (gym_python_threads{{{SEL}}})",
             "threads {{nemo_gym_server_name}} {{instance}}"),
        ], description="Tasks alive in each server's event loop, and its process's threads."),
        panel("Time paused by garbage collection", "percentunit", [
            (f"sum by (instance, nemo_gym_server_name, nemo_gym_python_gc_generation) "
             f"({rate('gym_python_gc_pause_seconds_sum')})",
             "{{nemo_gym_server_name}} gen {{nemo_gym_python_gc_generation}} {{instance}}"),
        ], description="Share of time each Python server was paused by its garbage collector, "
                       "by generation.", stack=True),
        panel("Memory sample time", "s", [
            (f"max by (instance) (gym_exporter_memory_sample_duration_seconds{{{HOST}}})",
             "{{instance}}")]),
    ],
    [label_variable("server", "Server", "gym_server_up", "nemo_gym_server_name")])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, d in (("gym-concurrency", CONCURRENCY), ("gym-resources-operations", OPERATIONS),
                    ("gym-memory", MEMORY)):
        with open(os.path.join(here, name + ".json"), "w") as f:
            json.dump(d, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
