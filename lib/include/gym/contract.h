// The metric contract (docs/metrics.md) as code: family and label names,
// the bounded value sets, and the operation buckets. Each value set lives in
// one table, so adding a value is a one-line change.
//
// Thread-safety: constants and pure functions only.
//
// API (docs/api.md): the enums (Component, Operation, Executor, Outcome)
// and the family and label names. The rest is internal.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace gym {

namespace family {
inline constexpr std::string_view kConcurrencyLimit = "gym_concurrency_limit";
inline constexpr std::string_view kConcurrencyActive = "gym_concurrency_active";
inline constexpr std::string_view kConcurrencyAvailable = "gym_concurrency_available";
inline constexpr std::string_view kConcurrencyQueueDepth = "gym_concurrency_queue_depth";
inline constexpr std::string_view kAdmissionTimeouts = "gym_concurrency_admission_timeouts_total";
inline constexpr std::string_view kAdmissionCancelled = "gym_concurrency_admission_cancelled_total";
inline constexpr std::string_view kConcurrencyAdmissions = "gym_concurrency_admissions_total";
inline constexpr std::string_view kConcurrencyHoldSeconds = "gym_concurrency_hold_seconds_total";
inline constexpr std::string_view kConcurrencyWaitDuration =
    "gym_concurrency_wait_duration_seconds";
inline constexpr std::string_view kConcurrencyOldestWait = "gym_concurrency_oldest_wait_seconds";
inline constexpr std::string_view kConcurrencyOldestHold = "gym_concurrency_oldest_hold_seconds";
// Served by the exporter from the snapshot's LimitRow (not written).
inline constexpr std::string_view kConcurrencyProcesses = "gym_concurrency_processes";
inline constexpr std::string_view kConcurrencyStrandedSlots = "gym_concurrency_stranded_slots";
inline constexpr std::string_view kOperationQueueDuration =
    "gym_resources_operation_queue_duration_seconds";
inline constexpr std::string_view kOperationDuration = "gym_resources_operation_duration_seconds";
inline constexpr std::string_view kOperationQueued = "gym_resources_operation_queued";
inline constexpr std::string_view kOperationActive = "gym_resources_operation_active";
inline constexpr std::string_view kOperationOldestQueued =
    "gym_resources_operation_oldest_queued_seconds";
inline constexpr std::string_view kOperationOldestActive =
    "gym_resources_operation_oldest_active_seconds";
// A Python server's runtime (gym_metrics.instrument_runtime: LoopMeter,
// RuntimeMeter).
inline constexpr std::string_view kEventLoopLag = "gym_python_event_loop_lag_seconds";
inline constexpr std::string_view kEventLoopBlocked = "gym_python_event_loop_blocked_seconds";
inline constexpr std::string_view kEventLoopTasks = "gym_python_event_loop_tasks";
inline constexpr std::string_view kGcPause = "gym_python_gc_pause_seconds";
inline constexpr std::string_view kGcCollections = "gym_python_gc_collections_total";
inline constexpr std::string_view kPythonThreads = "gym_python_threads";
// Written by declare_server(); read by the exporter, not exposed as is.
inline constexpr std::string_view kServerIdentity = "gym_server_identity";
}  // namespace family

namespace label {
inline constexpr std::string_view kComponent = "nemo_gym_concurrency_component";
inline constexpr std::string_view kLimitName = "nemo_gym_concurrency_limit_name";
inline constexpr std::string_view kServerName = "nemo_gym_server_name";
inline constexpr std::string_view kServerType = "nemo_gym_server_type";
inline constexpr std::string_view kOperation = "nemo_gym_resources_operation";
inline constexpr std::string_view kExecutor = "nemo_gym_resources_executor";
inline constexpr std::string_view kOutcome = "nemo_gym_resources_operation_outcome";
inline constexpr std::string_view kWaitOutcome = "nemo_gym_concurrency_wait_outcome";
inline constexpr std::string_view kGcGeneration = "nemo_gym_python_gc_generation";
}  // namespace label

enum class Component : uint8_t {
  kRolloutDriver,
  kAgentServer,
  kModelServer,
  kResourcesServer,
  kOther
};
inline constexpr std::array<std::string_view, 5> kComponents = {
    "rollout_driver", "agent_server", "model_server", "resources_server", "other"};

enum class Operation : uint8_t { kVerify, kTool, kJudge, kOther };
inline constexpr std::array<std::string_view, 4> kOperations = {"verify", "tool", "judge", "other"};

enum class Executor : uint8_t { kInline, kThread, kProcess, kSubprocess, kOther };
inline constexpr std::array<std::string_view, 5> kExecutors = {"inline", "thread", "process",
                                                               "subprocess", "other"};

enum class Outcome : uint8_t { kOk, kError, kTimeout, kCancelled, kCrashed };
inline constexpr std::array<std::string_view, 5> kOutcomes = {"ok", "error", "timeout", "cancelled",
                                                              "crashed"};

// How a wait for a slot of a concurrency limit ended.
enum class WaitOutcome : uint8_t { kAdmitted, kTimeout, kCancelled };
inline constexpr std::array<std::string_view, 3> kWaitOutcomes = {"admitted", "timeout",
                                                                  "cancelled"};

template <class Enum, size_t N>
constexpr std::string_view name_of(Enum v, const std::array<std::string_view, N>& table) {
  return table[static_cast<size_t>(v)];
}
template <class Enum, size_t N>
constexpr std::optional<Enum> parse_value(std::string_view s,
                                          const std::array<std::string_view, N>& table) {
  for (size_t i = 0; i < N; ++i)
    if (table[i] == s) return static_cast<Enum>(i);
  return std::nullopt;
}

inline std::string_view to_string(Component v) {
  return name_of(v, kComponents);
}
inline std::string_view to_string(Operation v) {
  return name_of(v, kOperations);
}
inline std::string_view to_string(Executor v) {
  return name_of(v, kExecutors);
}
inline std::string_view to_string(Outcome v) {
  return name_of(v, kOutcomes);
}
inline std::string_view to_string(WaitOutcome v) {
  return name_of(v, kWaitOutcomes);
}

// Operation bucket upper bounds: the seed's milliseconds, stored in
// nanoseconds (exposed in seconds: divide by kNanosPerSecond).
inline constexpr int64_t kNanosPerSecond = 1000000000;
inline constexpr std::array<int64_t, 13> kOperationBoundsNs = {
    1000000,    5000000,     10000000,    50000000,    100000000,    500000000,    1000000000,
    5000000000, 10000000000, 30000000000, 60000000000, 300000000000, 1800000000000};

// Garbage-collector pause bounds, 100 us to 5 s (a young collection takes
// microseconds, a full one of a large heap seconds), in nanoseconds.
inline constexpr std::array<int64_t, 10> kGcPauseBoundsNs = {
    100000,   500000,    1000000,   5000000,    10000000,
    50000000, 100000000, 500000000, 1000000000, 5000000000};
// CPython's collector generations: 0, 1 and 2.
inline constexpr std::array<std::string_view, 3> kGcGenerations = {"0", "1", "2"};

// A limit name: [a-z][a-z0-9_]*, at most 64 characters.
inline constexpr size_t kMaxLimitNameBytes = 64;
constexpr bool valid_limit_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxLimitNameBytes || s[0] < 'a' || s[0] > 'z') return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}
// A server name or type: 1 to 128 bytes (a label value), no NUL. (A writer
// also refuses a label value that is not UTF-8.) The one rule for the
// libraries and the exporter's configuration.
inline constexpr size_t kMaxServerNameBytes = 128;
constexpr bool valid_server_name(std::string_view s) {
  return !s.empty() && s.size() <= kMaxServerNameBytes && s.find('\0') == std::string_view::npos;
}

// Where writers and the exporter find the registry unless told otherwise.
inline constexpr const char* kDefaultRegistryDir = "/dev/shm/gym-metrics";

}  // namespace gym
