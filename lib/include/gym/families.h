// The contract table: every metric family gym-exporter serves, with its type,
// unit, HELP text and the label names its samples may carry. It is the one
// source: the exporter serves exactly these families (a family without a row
// is not served, and a test fails if one is emitted), and docs/metrics.md
// describes the same rows.
//
// Adding a family is one row here; the collector that emits it (exporter/src/
// collectors/) and its tests.
//
// Thread-safety: constants and pure functions only.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "gym/contract.h"

namespace gym {

enum class MetricType : uint8_t { kCounter, kGauge, kHistogram };

// Who writes a family's samples: the libraries' processes through the
// registry, or the exporter itself.
enum class Source : uint8_t { kRegistry, kExporter };

inline constexpr size_t kMaxFamilyLabels = 5;

struct FamilySpec {
  std::string_view name;
  MetricType type;
  Source source;
  std::string_view unit;  // "seconds", "bytes" or empty
  std::string_view help;
  // The label names a sample may carry (some are optional); unused slots are
  // empty. A histogram's "le" is implied.
  std::array<std::string_view, kMaxFamilyLabels> labels;

  constexpr bool has_label(std::string_view l) const {
    for (std::string_view x : labels)
      if (!x.empty() && x == l) return true;
    return false;
  }
};

inline constexpr FamilySpec kFamilies[] = {
    // Concurrency limits (MeteredSemaphore, LimitMeter). nemo_gym_server_name
    // only on limits opened with a server name.
    {family::kConcurrencyLimit,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Configured slots of a concurrency limit.",
     {label::kComponent, label::kLimitName, label::kServerName}},
    {family::kConcurrencyActive,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Slots of a concurrency limit held now.",
     {label::kComponent, label::kLimitName, label::kServerName}},
    {family::kConcurrencyAvailable,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Slots of a concurrency limit free now (limit - active).",
     {label::kComponent, label::kLimitName, label::kServerName}},
    {family::kConcurrencyQueueDepth,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Callers waiting for a slot of a concurrency limit now.",
     {label::kComponent, label::kLimitName, label::kServerName}},
    {family::kAdmissionTimeouts,
     MetricType::kCounter,
     Source::kRegistry,
     "",
     "Waits that ran out of the limit's admission timeout (only limits that have one).",
     {label::kComponent, label::kLimitName, label::kServerName}},
    {family::kAdmissionCancelled,
     MetricType::kCounter,
     Source::kRegistry,
     "",
     "Waits cancelled before a slot was free.",
     {label::kComponent, label::kLimitName, label::kServerName}},
    {family::kConcurrencyAdmissions,
     MetricType::kCounter,
     Source::kRegistry,
     "",
     "Callers that got a slot of a concurrency limit, at once or after a wait.",
     {label::kComponent, label::kLimitName, label::kServerName}},
    {family::kConcurrencyWaitDuration,
     MetricType::kHistogram,
     Source::kRegistry,
     "seconds",
     "Time callers that found no free slot of a concurrency limit waited, by how the wait "
     "ended.",
     {label::kComponent, label::kLimitName, label::kServerName, label::kWaitOutcome}},
    {family::kConcurrencyOldestWait,
     MetricType::kGauge,
     Source::kRegistry,
     "seconds",
     "How long the longest-waiting caller of a concurrency limit has waited now (0: none waits).",
     {label::kComponent, label::kLimitName, label::kServerName}},
    {family::kConcurrencyOldestHold,
     MetricType::kGauge,
     Source::kRegistry,
     "seconds",
     "How long the longest-held slot of a concurrency limit has been held now (0: none is held).",
     {label::kComponent, label::kLimitName, label::kServerName}},
    // Resources operations (ResourcesOperation); nemo_gym_server_name once the
    // process declared its server.
    {family::kOperationQueueDuration,
     MetricType::kHistogram,
     Source::kRegistry,
     "seconds",
     "Time resources operations waited for their limit.",
     {label::kOperation, label::kExecutor, label::kServerName}},
    {family::kOperationDuration,
     MetricType::kHistogram,
     Source::kRegistry,
     "seconds",
     "Time resources operations ran inside their limit, by outcome.",
     {label::kOperation, label::kExecutor, label::kOutcome, label::kServerName}},
    {family::kOperationQueued,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Resources operations waiting now.",
     {label::kOperation, label::kExecutor, label::kServerName}},
    {family::kOperationActive,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Resources operations running now.",
     {label::kOperation, label::kExecutor, label::kServerName}},
    {family::kOperationOldestQueued,
     MetricType::kGauge,
     Source::kRegistry,
     "seconds",
     "How long the longest-waiting resources operation has waited now (0: none waits).",
     {label::kOperation, label::kExecutor, label::kServerName}},
    {family::kOperationOldestActive,
     MetricType::kGauge,
     Source::kRegistry,
     "seconds",
     "How long the longest-running resources operation has run now (0: none runs).",
     {label::kOperation, label::kExecutor, label::kServerName}},
    // Servers' and the host's memory (the memory collector).
    {"gym_server_memory_usage_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Memory of a server's whole process tree now, by memory type (rss, pss, uss, swap).",
     {label::kServerName, label::kServerType, "memory_type"}},
    {"gym_server_memory_sampled_peak_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Largest sampled memory of a server's process tree since the exporter started.",
     {label::kServerName, label::kServerType, "memory_type"}},
    {"gym_server_processes",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Processes in a server's tree now.",
     {label::kServerName, label::kServerType}},
    {"gym_server_escaped_processes",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Processes of a server that left its tree (handed to init or a subreaper when their parent "
     "exited) and are still counted in it by lineage (pid and start time, while seen).",
     {label::kServerName, label::kServerType}},
    {"gym_server_info",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "A constant 1 labeled by the root pid of a server's process tree now.",
     {label::kServerName, label::kServerType, "process_pid"}},
    {"gym_server_threads",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Threads of the processes in a server's tree now.",
     {label::kServerName, label::kServerType}},
    {"gym_server_open_fds",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Open file descriptors of the processes in a server's tree now (only when every one's "
     "could be listed).",
     {label::kServerName, label::kServerType}},
    {"gym_server_cpu_seconds_total",
     MetricType::kCounter,
     Source::kExporter,
     "seconds",
     "CPU time of a server's tree, its processes' and their reaped children's, by mode (user, "
     "system), since the exporter first saw it.",
     {label::kServerName, label::kServerType, "mode"}},
    {"gym_server_up",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "1 when a server's root process is found now, 0 when it is gone (or its pidfile is "
     "unreadable or stale).",
     {label::kServerName, label::kServerType}},
    {"gym_server_exits_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Times a server's root process exited or was replaced, by reason (oom_kill when its "
     "cgroup's OOM kills grew meanwhile, else exited), since the exporter first saw it.",
     {label::kServerName, label::kServerType, "reason"}},
    {"gym_host_memory_usage_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Host memory in use: MemTotal - MemAvailable.",
     {}},
    {"gym_host_memory_available_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Host MemAvailable.",
     {}},
    {"gym_host_memory_total_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Host MemTotal.",
     {}},
    {"gym_host_memory_sampled_peak_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Largest sampled host memory usage since the exporter started.",
     {}},
    {"gym_host_oom_kills_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Processes the kernel's OOM killer killed on the host since boot (/proc/vmstat oom_kill).",
     {}},
    {"gym_exporter_memory_sample_duration_seconds",
     MetricType::kGauge,
     Source::kExporter,
     "seconds",
     "Time the last memory sample took.",
     {}},
    {"gym_exporter_memory_sample_errors_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Failed procfs reads during memory samples, by reason.",
     {"reason"}},
    {"gym_exporter_unseen_server_processes",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Live processes that declared a server from a pid namespace this exporter cannot see; "
     "servers with no other process in sight have no per-process series.",
     {}},
    {"gym_exporter_memory_sample_overruns_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Memory sample periods skipped because the previous sample was still running.",
     {}},
    // Servers' own cgroups (the cgroup collector).
    {"gym_server_cgroup_info",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "A constant 1 labeled by the cgroup a server's root process has of its own, and its "
     "version (1: the v1 memory hierarchy, 2: the unified one).",
     {label::kServerName, label::kServerType, "cgroup", "cgroup_version"}},
    {"gym_server_cgroup_memory_usage_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Memory charged to a server's cgroup now (memory.current; v1: memory.usage_in_bytes).",
     {label::kServerName, label::kServerType}},
    {"gym_server_cgroup_memory_peak_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Largest memory charged to a server's cgroup since it was created (memory.peak; v1: "
     "memory.max_usage_in_bytes).",
     {label::kServerName, label::kServerType}},
    {"gym_server_cgroup_memory_limit_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Memory limit of a server's cgroup (memory.max; v1: memory.limit_in_bytes); absent when "
     "unlimited.",
     {label::kServerName, label::kServerType}},
    {"gym_server_cgroup_oom_kills_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Processes the OOM killer killed in a server's cgroup (memory.events oom_kill; v1: "
     "memory.oom_control).",
     {label::kServerName, label::kServerType}},
    {"gym_server_cgroup_memory_pressure_seconds_total",
     MetricType::kCounter,
     Source::kExporter,
     "seconds",
     "Time some (or all: full) of a server's cgroup's tasks stalled waiting for memory "
     "(memory.pressure total; cgroup v2 only).",
     {label::kServerName, label::kServerType, "kind"}},
    {"gym_server_cgroup_memory_pressure_ratio",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Share of wall time some (or all: full) of a server's cgroup's tasks stalled waiting for "
     "memory, averaged over a window (memory.pressure avg10, avg60, avg300; cgroup v2 only).",
     {label::kServerName, label::kServerType, "kind", "window"}},
    {"gym_exporter_cgroup_sample_errors_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Servers' cgroups whose memory usage could not be read, one per cgroup and sample.",
     {}},
    // The exporter itself.
    {"gym_exporter_build_info",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "A metric with a constant '1' value labeled by version and revision of gym-exporter.",
     {"version", "revision"}},
    {"gym_exporter_scrape_duration_seconds",
     MetricType::kGauge,
     Source::kExporter,
     "seconds",
     "Time gym-exporter took to build this exposition.",
     {}},
    {"gym_exporter_http_requests_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "HTTP requests the exporter answered, by path (metrics, snapshot, healthy, ready, landing, "
     "other) and status code.",
     {"code", "path"}},
    {"gym_exporter_config_reloads_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Configuration reloads (SIGHUP), by result (success: applied; failure: refused).",
     {"result"}},
    {"gym_exporter_config_last_reload_successful",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "1 when the last reload applied (or none was tried), 0 when it was refused.",
     {}},
    {"gym_exporter_config_last_reload_success_timestamp_seconds",
     MetricType::kGauge,
     Source::kExporter,
     "seconds",
     "Unix time of the start or of the last reload that applied.",
     {}},
    {"gym_exporter_contract_violations_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Families a collector produced that break the contract table: not served (a bug).",
     {}},
    {"gym_exporter_registry_segments",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Live writer processes seen in the registry, by segment format version.",
     {"format_version"}},
    {"gym_exporter_registry_unmetered_writers",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Live writer processes whose numbers cannot be read: no segment (registry full or "
     "unwritable) or a damaged one.",
     {}},
    {"gym_exporter_registry_damaged_segments_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Live segments that lost pages under the reader (truncated): last values kept.",
     {}},
    {"gym_exporter_registry_resets_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Live counters or histograms that went down, folded in as a reset of their segment.",
     {}},
    {"gym_exporter_registry_read_errors_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Files in the registry directory that could not be opened or read.",
     {}},
    {"gym_exporter_registry_totals_write_errors_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Failed writes of the folded totals file (exited writers' segments are kept meanwhile).",
     {}},
    {"gym_exporter_registry_retiring",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "1 when this exporter holds the registry directory's lock and retires segments.",
     {}},
    {"gym_exporter_registry_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Memory the registry directory's files take (allocated blocks).",
     {}},
    {"gym_exporter_series",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Series the registry reader tracks now.",
     {}},
    {"gym_exporter_series_expired_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Series without a live writer forgotten after registry.retired_series_ttl.",
     {}},
    {"gym_exporter_series_over_limit_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Series records not tracked because registry.max_series was reached.",
     {}},
    {"gym_exporter_registry_retired_segments_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Writer processes that exited and whose counters were folded in.",
     {}},
    {"gym_exporter_registry_dropped_series_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Series that writers could not register (registry full or limits exceeded).",
     {}},
    {"gym_exporter_registry_rejected_segments_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Files in the registry directory that were not valid segments.",
     {}},
    {"gym_exporter_registry_inconsistent_reads_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Histogram reads whose buckets did not add up to their count while a writer observed, "
     "after retries; the histogram's last values were served instead.",
     {}},
    {"gym_exporter_registry_invalid_records_total",
     MetricType::kCounter,
     Source::kExporter,
     "",
     "Series records in segments whose metadata was invalid, skipped.",
     {}},
    {"gym_exporter_registry_unknown_series",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Series in the registry whose family is not in the contract table: not served.",
     {}},
    // The standard process metrics of the exporter's own process.
    {"process_cpu_seconds_total",
     MetricType::kCounter,
     Source::kExporter,
     "seconds",
     "Total user and system CPU time spent in seconds.",
     {}},
    {"process_resident_memory_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Resident memory size in bytes.",
     {}},
    {"process_virtual_memory_bytes",
     MetricType::kGauge,
     Source::kExporter,
     "bytes",
     "Virtual memory size in bytes.",
     {}},
    {"process_open_fds",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Number of open file descriptors.",
     {}},
    {"process_max_fds",
     MetricType::kGauge,
     Source::kExporter,
     "",
     "Maximum number of open file descriptors.",
     {}},
    {"process_start_time_seconds",
     MetricType::kGauge,
     Source::kExporter,
     "seconds",
     "Start time of the process since unix epoch in seconds.",
     {}},
};

// The row of `name`, or nullptr.
constexpr const FamilySpec* find_family(std::string_view name) {
  for (const FamilySpec& f : kFamilies)
    if (f.name == name) return &f;
  return nullptr;
}

// OpenTelemetry names: what a scraper that accepts UTF-8 names
// (escaping=allow-utf-8) gets instead, the seeds' dotted instrument and
// attribute names. Not mechanical (dots are not all underscores, and an
// OpenTelemetry name carries no unit), so written out: a family or label not
// listed keeps its name. Families: counters keep _total, as the seeds name
// them; durations lose _seconds (their unit is metadata).
struct OtelName {
  std::string_view prometheus;
  std::string_view otel;
};
inline constexpr OtelName kOtelFamilyNames[] = {
    {family::kConcurrencyLimit, "gym.concurrency.limit"},
    {family::kConcurrencyActive, "gym.concurrency.active"},
    {family::kConcurrencyAvailable, "gym.concurrency.available"},
    {family::kConcurrencyQueueDepth, "gym.concurrency.queue_depth"},
    {family::kAdmissionTimeouts, "gym.concurrency.admission_timeouts_total"},
    {family::kAdmissionCancelled, "gym.concurrency.admission_cancelled_total"},
    {family::kConcurrencyAdmissions, "gym.concurrency.admissions_total"},
    {family::kConcurrencyWaitDuration, "gym.concurrency.wait_duration"},
    {family::kConcurrencyOldestWait, "gym.concurrency.oldest_wait"},
    {family::kConcurrencyOldestHold, "gym.concurrency.oldest_hold"},
    {family::kOperationQueueDuration, "gym.resources.operation.queue_duration"},
    {family::kOperationDuration, "gym.resources.operation.duration"},
    {family::kOperationQueued, "gym.resources.operation.queued"},
    {family::kOperationActive, "gym.resources.operation.active"},
    {family::kOperationOldestQueued, "gym.resources.operation.oldest_queued"},
    {family::kOperationOldestActive, "gym.resources.operation.oldest_active"},
};
inline constexpr OtelName kOtelLabelNames[] = {
    {label::kComponent, "nemo.gym.concurrency.component"},
    {label::kLimitName, "nemo.gym.concurrency.limit_name"},
    {label::kServerName, "nemo.gym.server.name"},
    {label::kServerType, "nemo.gym.server.type"},
    {label::kOperation, "nemo.gym.resources.operation"},
    {label::kExecutor, "nemo.gym.resources.executor"},
    {label::kOutcome, "nemo.gym.resources.operation.outcome"},
    {label::kWaitOutcome, "nemo.gym.concurrency.wait_outcome"},
};

// `name` looked up in a table of names, one way or the other; itself when
// it is not there.
template <size_t N>
constexpr std::string_view rename(const OtelName (&table)[N], std::string_view name, bool to_otel) {
  for (const OtelName& n : table)
    if ((to_otel ? n.prometheus : n.otel) == name) return to_otel ? n.otel : n.prometheus;
  return name;
}
// A family's or label's OpenTelemetry name, or `name` itself when it has none.
constexpr std::string_view otel_family_name(std::string_view name) {
  return rename(kOtelFamilyNames, name, true);
}
constexpr std::string_view otel_label_name(std::string_view name) {
  return rename(kOtelLabelNames, name, true);
}
// Back: the Prometheus name of an OpenTelemetry name, or `name` itself.
constexpr std::string_view prometheus_family_name(std::string_view name) {
  return rename(kOtelFamilyNames, name, false);
}
constexpr std::string_view prometheus_label_name(std::string_view name) {
  return rename(kOtelLabelNames, name, false);
}

}  // namespace gym
