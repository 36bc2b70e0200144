// The registry's rows of the contract table: the metric families the
// libraries' processes write through the registry, with their type, unit,
// HELP text and the label names their samples may carry; and the
// OpenTelemetry names of the contract's labels. The exporter's own rows and
// the whole table are the exporter's (exporter/src/contract/table.h); the
// exporter serves exactly the families of the whole table, and
// docs/metrics.md describes the same rows.
//
// Adding a registry family is one row here; the primitive that writes it and
// its tests.
//
// Thread-safety: constants and pure functions only.
//
// Internal (docs/api.md): installed for the exporter; no compatibility promise.
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
  // Its OpenTelemetry name: what a scraper that accepts UTF-8 names
  // (escaping=allow-utf-8) gets instead, the seeds' dotted instrument name;
  // empty: the family keeps its name (it is not in the seeds). Not
  // mechanical (dots are not all underscores, and an OpenTelemetry name
  // carries no unit), so written out. Counters keep _total, as the seeds
  // name them; durations lose _seconds (their unit is metadata).
  std::string_view otel;

  constexpr bool has_label(std::string_view l) const {
    for (std::string_view x : labels)
      if (!x.empty() && x == l) return true;
    return false;
  }
};

inline constexpr FamilySpec kRegistryFamilies[] = {
    // Concurrency limits (MeteredSemaphore, LimitMeter). nemo_gym_server_name
    // only on limits opened with a server name.
    {family::kConcurrencyLimit,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Configured slots of a concurrency limit.",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.limit"},
    {family::kConcurrencyActive,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Slots of a concurrency limit held now.",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.active"},
    {family::kConcurrencyAvailable,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Slots of a concurrency limit free now (limit - active).",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.available"},
    {family::kConcurrencyQueueDepth,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Callers waiting for a slot of a concurrency limit now.",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.queue_depth"},
    {family::kAdmissionTimeouts,
     MetricType::kCounter,
     Source::kRegistry,
     "",
     "Waits that ran out of the limit's admission timeout (only limits that have one).",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.admission_timeouts_total"},
    {family::kAdmissionCancelled,
     MetricType::kCounter,
     Source::kRegistry,
     "",
     "Waits cancelled before a slot was free.",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.admission_cancelled_total"},
    {family::kConcurrencyAdmissions,
     MetricType::kCounter,
     Source::kRegistry,
     "",
     "Callers that got a slot of a concurrency limit, at once or after a wait.",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.admissions_total"},
    {family::kConcurrencyHoldSeconds,
     MetricType::kCounter,
     Source::kRegistry,
     "seconds",
     "Time slots of a concurrency limit were held, summed over the holds that ended: with "
     "gym_concurrency_admissions_total, the mean hold time.",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.hold_time_total"},
    {family::kConcurrencyWaitDuration,
     MetricType::kHistogram,
     Source::kRegistry,
     "seconds",
     "Time callers that found no free slot of a concurrency limit waited, by how the wait "
     "ended.",
     {label::kComponent, label::kLimitName, label::kServerName, label::kWaitOutcome},
     "gym.concurrency.wait_duration"},
    {family::kConcurrencyOldestWait,
     MetricType::kGauge,
     Source::kRegistry,
     "seconds",
     "How long the longest-waiting caller of a concurrency limit has waited now (0: none waits).",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.oldest_wait"},
    {family::kConcurrencyOldestHold,
     MetricType::kGauge,
     Source::kRegistry,
     "seconds",
     "How long the longest-held slot of a concurrency limit has been held now (0: none is held).",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.oldest_hold"},
    {family::kConcurrencyProcesses,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Live processes holding a concurrency limit (each opened it with these labels).",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.processes"},
    {family::kConcurrencyStrandedSlots,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Free slots of a limit in processes with no caller queued while another process of the "
     "limit has callers queued (0 otherwise): load sent to the wrong process, not a limit too "
     "small.",
     {label::kComponent, label::kLimitName, label::kServerName},
     "gym.concurrency.stranded_slots"},
    // Resources operations (ResourcesOperation); nemo_gym_server_name once the
    // process declared its server.
    {family::kOperationQueueDuration,
     MetricType::kHistogram,
     Source::kRegistry,
     "seconds",
     "Time resources operations waited for their limit, by how the wait ended (admitted, or "
     "abandoned: timeout, cancelled).",
     {label::kOperation, label::kExecutor, label::kServerName, label::kWaitOutcome},
     "gym.resources.operation.queue_duration"},
    {family::kOperationDuration,
     MetricType::kHistogram,
     Source::kRegistry,
     "seconds",
     "Time resources operations ran inside their limit, by outcome.",
     {label::kOperation, label::kExecutor, label::kOutcome, label::kServerName},
     "gym.resources.operation.duration"},
    {family::kOperationQueued,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Resources operations waiting now.",
     {label::kOperation, label::kExecutor, label::kServerName},
     "gym.resources.operation.queued"},
    {family::kOperationActive,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Resources operations running now.",
     {label::kOperation, label::kExecutor, label::kServerName},
     "gym.resources.operation.active"},
    {family::kOperationOldestQueued,
     MetricType::kGauge,
     Source::kRegistry,
     "seconds",
     "How long the longest-waiting resources operation has waited now (0: none waits).",
     {label::kOperation, label::kExecutor, label::kServerName},
     "gym.resources.operation.oldest_queued"},
    {family::kOperationOldestActive,
     MetricType::kGauge,
     Source::kRegistry,
     "seconds",
     "How long the longest-running resources operation has run now (0: none runs).",
     {label::kOperation, label::kExecutor, label::kServerName},
     "gym.resources.operation.oldest_active"},
    // A Python server's runtime (gym_metrics.instrument_runtime); series
    // carry nemo_gym_server_name when the process declared a server.
    {family::kEventLoopLag,
     MetricType::kHistogram,
     Source::kRegistry,
     "seconds",
     "How late an event loop's periodic probe ran compared with when it was due.",
     {label::kServerName},
     "gym.python.event_loop.lag"},
    {family::kEventLoopBlocked,
     MetricType::kGauge,
     Source::kRegistry,
     "seconds",
     "How long an event loop's heartbeat is overdue now: how long its current callback has run, "
     "less up to the probe's interval and grace (0: on time).",
     {label::kServerName},
     "gym.python.event_loop.blocked"},
    {family::kEventLoopTasks,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Tasks alive in an event loop, as of its last probe.",
     {label::kServerName},
     "gym.python.event_loop.tasks"},
    {family::kGcPause,
     MetricType::kHistogram,
     Source::kRegistry,
     "seconds",
     "Time garbage collections paused a Python process, by generation.",
     {label::kServerName, label::kGcGeneration},
     "gym.python.gc.pause"},
    {family::kGcCollections,
     MetricType::kCounter,
     Source::kRegistry,
     "",
     "Garbage collections of a Python process, by generation.",
     {label::kServerName, label::kGcGeneration},
     "gym.python.gc.collections_total"},
    {family::kPythonThreads,
     MetricType::kGauge,
     Source::kRegistry,
     "",
     "Threads of a Python process (threading.active_count()), as of its loop's last probe.",
     {label::kServerName},
     "gym.python.threads"},
};

// OpenTelemetry label names (the families' are a column of their rows):
// the seeds' dotted attribute names; a label not listed keeps its name.
struct OtelName {
  std::string_view prometheus;
  std::string_view otel;
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
    {label::kGcGeneration, "nemo.gym.python.gc.generation"},
};

// A label's OpenTelemetry name (`to_otel`) or back, from a table of names;
// `name` itself when it is not there.
template <size_t N>
constexpr std::string_view rename(const OtelName (&table)[N], std::string_view name, bool to_otel) {
  for (const OtelName& n : table)
    if ((to_otel ? n.prometheus : n.otel) == name) return to_otel ? n.otel : n.prometheus;
  return name;
}
constexpr std::string_view otel_label_name(std::string_view name) {
  return rename(kOtelLabelNames, name, true);
}
// Back: the Prometheus name of an OpenTelemetry label name, or `name` itself.
constexpr std::string_view prometheus_label_name(std::string_view name) {
  return rename(kOtelLabelNames, name, false);
}

}  // namespace gym
