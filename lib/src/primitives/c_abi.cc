// The C ABI (gym_metrics.h) over the C++ primitives.
#include "gym_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "gym/limit_meter.h"
#include "gym/resources_operation.h"
#include "gym/runtime_meter.h"
#include "gym/server_identity.h"

struct gym_limit {
  gym::LimitMeter meter;
};
struct gym_loop {
  gym::LoopMeter meter;
};
struct gym_runtime {
  gym::RuntimeMeter meter;
};

namespace {

thread_local std::string t_last_error;

int fail(int code, std::string message) {
  try {
    t_last_error = std::move(message);
  } catch (...) {
  }
  return code;
}

// Runs `body`, turning exceptions into codes; no exception leaves.
template <class Body>
int guarded(Body&& body) {
  try {
    return body();
  } catch (const std::invalid_argument& e) {
    return fail(GYM_EINVAL, e.what());
  } catch (const std::logic_error& e) {  // a call that does not fit the state
    return fail(GYM_ESTATE, e.what());
  } catch (const std::bad_alloc&) {
    return fail(GYM_ENOMEM, "out of memory");
  } catch (const std::exception& e) {
    return fail(GYM_EINVAL, e.what());
  } catch (...) {
    return fail(GYM_EINVAL, "unknown error");
  }
}

template <class Enum, size_t N>
Enum parse_or_throw(const char* what, const char* s, const std::array<std::string_view, N>& table) {
  if (s == nullptr) throw std::invalid_argument(std::string(what) + " is NULL");
  auto v = gym::parse_value<Enum>(s, table);
  if (!v) throw std::invalid_argument("unknown " + std::string(what) + " '" + s + "'");
  return *v;
}

// A table of names (each a string literal: NUL-terminated) looked up by
// NUL-terminated strings: the first byte picks the one candidate (or the
// few), which strcmp then checks whole. What a binding that names its kinds
// pays three times an operation, instead of a strlen and a comparison with
// every name.
template <size_t N>
struct NameTable {
  std::array<std::string_view, N> names;
  std::array<uint8_t, 256> first{};  // by first byte: 1 + the first name's index; 0: none
  constexpr explicit NameTable(const std::array<std::string_view, N>& table) : names(table) {
    for (size_t i = N; i-- > 0;) first[static_cast<uint8_t>(table[i][0])] = uint8_t(i + 1);
  }
  // The index of `s`, or -1.
  int find(const char* s) const noexcept {
    if (s == nullptr || first[static_cast<uint8_t>(s[0])] == 0) return -1;
    for (size_t i = first[static_cast<uint8_t>(s[0])] - 1u; i < N; ++i)
      if (names[i][0] == s[0] && std::strcmp(s, names[i].data()) == 0) return static_cast<int>(i);
    return -1;
  }
};
constexpr NameTable kOperationNames(gym::kOperations);
constexpr NameTable kExecutorNames(gym::kExecutors);
constexpr NameTable kOutcomeNames(gym::kOutcomes);

std::optional<std::string_view> optional_name(const char* s) {
  if (s == nullptr) return std::nullopt;
  return std::string_view(s);
}

// A new loop or runtime meter (a struct of one `meter`) of a server, or
// none, into *out.
template <class Handle>
int open_meter(const char* server_name, Handle** out) {
  return guarded([&] {
    if (out == nullptr) throw std::invalid_argument("out is NULL");
    *out = new Handle{{optional_name(server_name), gym::SegmentWriter::process()}};
    return GYM_OK;
  });
}

// A call on a meter's handle: EINVAL when the handle (`what`) is NULL, else
// what `call` returns for its meter (an exception: its error code).
template <class Handle, class Call>
int on_meter(Handle* handle, const char* what, Call&& call) {
  if (handle == nullptr) return fail(GYM_EINVAL, std::string(what) + " is NULL");
  return guarded([&] { return call(handle->meter); });
}

int64_t seconds_to_ns(const char* what, double s) {
  if (!std::isfinite(s) || s < 0)
    throw std::invalid_argument(std::string(what) + " must be a finite number >= 0");
  return static_cast<int64_t>(std::llround(std::min(s, 9.2e9) * 1e9));
}

// Decrements *v when it is positive; false, changing nothing, otherwise.
// On a kind's queued or active gauge (Gauge::raw()): an event that does not
// fit (dequeued or started without queued, finished without started) is
// refused before anything changes, and the check is the gauge's own update
// (no count of the C ABI's beside it; it counts the process's operations of
// the kind, C++ scopes' too).
bool take_one(int64_t* v) {
  int64_t n = __atomic_load_n(v, __ATOMIC_RELAXED);
  do {
    if (n <= 0) return false;
  } while (!__atomic_compare_exchange_n(v, &n, n - 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return true;
}

// An operation kind of gym_operation_kind: (operation, executor).
struct Kind {
  gym::Operation op;
  gym::Executor ex;
};
Kind kind_or_throw(int kind) {
  constexpr int n = static_cast<int>(gym::kOperations.size() * gym::kExecutors.size());
  if (kind < 0 || kind >= n)
    throw std::invalid_argument("unknown operation kind " + std::to_string(kind));
  const int executors = static_cast<int>(gym::kExecutors.size());
  return {static_cast<gym::Operation>(kind / executors),
          static_cast<gym::Executor>(kind % executors)};
}
static_assert(GYM_OUTCOME_OK == int(gym::Outcome::kOk) &&
              GYM_OUTCOME_ERROR == int(gym::Outcome::kError) &&
              GYM_OUTCOME_TIMEOUT == int(gym::Outcome::kTimeout) &&
              GYM_OUTCOME_CANCELLED == int(gym::Outcome::kCancelled) &&
              GYM_OUTCOME_CRASHED == int(gym::Outcome::kCrashed));

// The C ABI's trace context: two byte arrays, either NULL for none.
std::optional<gym::TraceContext> trace_of(const uint8_t* trace_id, const uint8_t* span_id) {
  if (trace_id == nullptr || span_id == nullptr) return std::nullopt;
  gym::TraceContext t;
  std::memcpy(t.trace_id.data(), trace_id, t.trace_id.size());
  std::memcpy(t.span_id.data(), span_id, t.span_id.size());
  return t;
}
const gym::TraceContext* ptr(const std::optional<gym::TraceContext>& t) {
  return t ? &*t : nullptr;
}

// A slot was to be taken, but every one is held.
int all_held(const gym_limit* l) {
  return fail(GYM_ESTATE,
              "a slot was taken but all " + std::to_string(l->meter.limit()) + " are held");
}

}  // namespace

extern "C" {

int gym_limit_open(const char* component, const char* limit_name, const char* server_name,
                   int64_t limit, double admission_timeout_s, gym_limit** out) {
  return guarded([&] {
    if (out == nullptr) throw std::invalid_argument("out is NULL");
    if (limit_name == nullptr) throw std::invalid_argument("limit_name is NULL");
    const auto c = parse_or_throw<gym::Component>("component", component, gym::kComponents);
    const bool has_timeout = !(admission_timeout_s < 0) && !std::isnan(admission_timeout_s);
    std::optional<std::string_view> server;
    if (server_name != nullptr) server = server_name;
    *out = new gym_limit{
        gym::LimitMeter(limit, c, limit_name, server, has_timeout, gym::SegmentWriter::process())};
    return GYM_OK;
  });
}

void gym_limit_close(gym_limit* limit) {
  delete limit;
}

#define GYM_CHECK_LIMIT(l) \
  if ((l) == nullptr) return fail(GYM_EINVAL, "limit is NULL")

int gym_limit_acquired_t(gym_limit* l, int64_t* hold) {
  GYM_CHECK_LIMIT(l);
  if (!l->meter.move_available(-1)) return all_held(l);
  const int64_t t = l->meter.admitted_at_once();
  if (hold != nullptr) *hold = t;
  return GYM_OK;
}

int gym_limit_wait_started_t(gym_limit* l, int64_t* wait) {
  GYM_CHECK_LIMIT(l);
  const int64_t t = l->meter.wait_started();
  if (wait != nullptr) *wait = t;
  return GYM_OK;
}

int gym_limit_wait_admitted_t(gym_limit* l, int64_t wait, int64_t* hold) {
  return gym_limit_wait_admitted_x(l, wait, hold, nullptr, nullptr);
}

int gym_limit_wait_admitted_x(gym_limit* l, int64_t wait, int64_t* hold, const uint8_t* trace_id,
                              const uint8_t* span_id) {
  GYM_CHECK_LIMIT(l);
  if (l->meter.queued() <= 0) return fail(GYM_ESTATE, "no caller is waiting");
  if (!l->meter.move_available(-1)) return all_held(l);
  const std::optional<int64_t> t = l->meter.wait_admitted(wait, ptr(trace_of(trace_id, span_id)));
  if (!t) {
    l->meter.move_available(+1);  // back as it was
    return fail(GYM_ESTATE, "no caller is waiting");
  }
  if (hold != nullptr) *hold = *t;
  return GYM_OK;
}

int gym_limit_wait_timed_out_t(gym_limit* l, int64_t wait) {
  return gym_limit_wait_timed_out_x(l, wait, nullptr, nullptr);
}

namespace {
// A wait of `l`'s that ended without a slot, as `outcome`.
int wait_failed(gym_limit* l, int64_t wait, gym::WaitOutcome outcome, const uint8_t* trace_id,
                const uint8_t* span_id) {
  GYM_CHECK_LIMIT(l);
  if (!l->meter.wait_failed(wait, outcome, ptr(trace_of(trace_id, span_id))))
    return fail(GYM_ESTATE, "no caller is waiting");
  return GYM_OK;
}
}  // namespace

int gym_limit_wait_timed_out_x(gym_limit* l, int64_t wait, const uint8_t* trace_id,
                               const uint8_t* span_id) {
  return wait_failed(l, wait, gym::WaitOutcome::kTimeout, trace_id, span_id);
}

int gym_limit_wait_cancelled_t(gym_limit* l, int64_t wait) {
  return gym_limit_wait_cancelled_x(l, wait, nullptr, nullptr);
}

int gym_limit_wait_cancelled_x(gym_limit* l, int64_t wait, const uint8_t* trace_id,
                               const uint8_t* span_id) {
  return wait_failed(l, wait, gym::WaitOutcome::kCancelled, trace_id, span_id);
}

int gym_limit_released_t(gym_limit* l, int64_t hold) {
  GYM_CHECK_LIMIT(l);
  if (!l->meter.move_available(+1)) return fail(GYM_ESTATE, "release without a slot held");
  l->meter.released(hold);
  return GYM_OK;
}

int gym_limit_handed_off_t(gym_limit* l, int64_t hold, int64_t wait, int64_t* next) {
  return gym_limit_handed_off_x(l, hold, wait, next, nullptr, nullptr);
}

int gym_limit_handed_off_x(gym_limit* l, int64_t hold, int64_t wait, int64_t* next,
                           const uint8_t* trace_id, const uint8_t* span_id) {
  GYM_CHECK_LIMIT(l);
  if (__atomic_load_n(l->meter.available(), __ATOMIC_RELAXED) >= l->meter.limit())
    return fail(GYM_ESTATE, "hand-off without a slot held");
  const std::optional<int64_t> t =
      l->meter.handed_off(hold, wait, ptr(trace_of(trace_id, span_id)));
  if (!t) return fail(GYM_ESTATE, "hand-off with no caller waiting");
  if (next != nullptr) *next = *t;
  return GYM_OK;
}

int gym_limit_acquired(gym_limit* l) {
  return gym_limit_acquired_t(l, nullptr);
}
int gym_limit_wait_started(gym_limit* l) {
  return gym_limit_wait_started_t(l, nullptr);
}
int gym_limit_wait_admitted(gym_limit* l) {
  return gym_limit_wait_admitted_t(l, 0, nullptr);
}
int gym_limit_wait_timed_out(gym_limit* l) {
  return gym_limit_wait_timed_out_t(l, 0);
}
int gym_limit_wait_cancelled(gym_limit* l) {
  return gym_limit_wait_cancelled_t(l, 0);
}
int gym_limit_released(gym_limit* l) {
  return gym_limit_released_t(l, 0);
}

int64_t gym_limit_active(const gym_limit* l) {
  return l == nullptr ? -1
                      : l->meter.limit() - __atomic_load_n(l->meter.available(), __ATOMIC_RELAXED);
}

int64_t gym_limit_queued(const gym_limit* l) {
  return l == nullptr ? -1 : l->meter.queued();
}

int gym_operation_kind(const char* operation, const char* executor) {
  const int op = kOperationNames.find(operation);
  const int ex = kExecutorNames.find(executor);
  if (op >= 0 && ex >= 0) return op * static_cast<int>(gym::kExecutors.size()) + ex;
  // Why not, in the words of the parsers (the slow path only).
  return -guarded([&] {
    parse_or_throw<gym::Operation>("operation", operation, gym::kOperations);
    parse_or_throw<gym::Executor>("executor", executor, gym::kExecutors);
    return GYM_OK;
  });
}

// The events by kind: no strings to parse, durations in integer nanoseconds.
int gym_operation_queued_k(int kind, int64_t* queued) {
  return guarded([&] {
    const Kind k = kind_or_throw(kind);
    const auto& cell = gym::OperationMetrics::process().cell(k.op, k.ex);
    cell.queued.add(1);
    const int64_t t = cell.queued_ages.begin(gym::segment::stamp_now_ns());
    if (queued != nullptr) *queued = t;
    return GYM_OK;
  });
}

int gym_operation_abandoned_k(int kind, int64_t queue_ns, int outcome, int64_t queued) {
  return guarded([&] {
    const Kind k = kind_or_throw(kind);
    if (queue_ns < 0) throw std::invalid_argument("queue_ns must be >= 0");
    if (outcome != GYM_OUTCOME_TIMEOUT && outcome != GYM_OUTCOME_CANCELLED)
      throw std::invalid_argument("an abandoned wait's outcome is timeout or cancelled");
    const auto& cell = gym::OperationMetrics::process().cell(k.op, k.ex);
    if (!take_one(cell.queued.raw())) return fail(GYM_ESTATE, "no such operation is queued");
    cell.queue_duration(outcome == GYM_OUTCOME_TIMEOUT ? gym::WaitOutcome::kTimeout
                                                       : gym::WaitOutcome::kCancelled)
        .observe(queue_ns);
    cell.queued_ages.end(queued);
    return GYM_OK;
  });
}

// Without the wait's length: measured from its ticket's start (the coarse
// clock's, so up to a tick long), or 0 s without a ticket.
int gym_operation_dequeued_k(int kind, int64_t queued) {
  const int64_t start = queued > 0 ? gym::segment::ticket_start(queued) : 0;
  const int64_t waited =
      start > 0 ? std::max<int64_t>(gym::segment::precise_now_ns() - start, 0) : 0;
  return gym_operation_abandoned_k(kind, waited, GYM_OUTCOME_CANCELLED, queued);
}

int gym_operation_started_k(int kind, int64_t queue_ns, int64_t queued, int64_t* active) {
  return guarded([&] {
    const Kind k = kind_or_throw(kind);
    if (queue_ns < 0) throw std::invalid_argument("queue_ns must be >= 0");
    const auto& cell = gym::OperationMetrics::process().cell(k.op, k.ex);
    if (!take_one(cell.queued.raw())) return fail(GYM_ESTATE, "no such operation is queued");
    cell.active.add(1);
    cell.queue_duration(gym::WaitOutcome::kAdmitted).observe(queue_ns);
    const int64_t t = cell.active_ages.begin(gym::segment::stamp_now_ns());
    cell.queued_ages.end(queued);
    if (active != nullptr) *active = t;
    return GYM_OK;
  });
}

int gym_operation_finished_k(int kind, int64_t duration_ns, int outcome, int64_t active) {
  return gym_operation_finished_kx(kind, duration_ns, outcome, active, nullptr, nullptr);
}

int gym_operation_finished_kx(int kind, int64_t duration_ns, int outcome, int64_t active,
                              const uint8_t* trace_id, const uint8_t* span_id) {
  return guarded([&] {
    const Kind k = kind_or_throw(kind);
    if (duration_ns < 0) throw std::invalid_argument("duration_ns must be >= 0");
    if (outcome < 0 || outcome >= static_cast<int>(gym::kOutcomes.size()))
      throw std::invalid_argument("unknown outcome " + std::to_string(outcome));
    const auto& cell = gym::OperationMetrics::process().cell(k.op, k.ex);
    if (!take_one(cell.active.raw())) return fail(GYM_ESTATE, "no such operation is running");
    cell.active_ages.end(active);
    const gym::Histogram& h = cell.duration(static_cast<gym::Outcome>(outcome));
    if (const std::optional<gym::TraceContext> t = trace_of(trace_id, span_id))
      h.observe(duration_ns, *t);
    else
      h.observe(duration_ns);
    return GYM_OK;
  });
}

// The string forms: parsed into a kind, then the same events.
int gym_operation_queued_t(const char* operation, const char* executor, int64_t* queued) {
  const int kind = gym_operation_kind(operation, executor);
  return kind < 0 ? -kind : gym_operation_queued_k(kind, queued);
}

int gym_operation_dequeued_t(const char* operation, const char* executor, int64_t queued) {
  const int kind = gym_operation_kind(operation, executor);
  return kind < 0 ? -kind : gym_operation_dequeued_k(kind, queued);
}

int gym_operation_started_t(const char* operation, const char* executor, double queue_seconds,
                            int64_t queued, int64_t* active) {
  const int kind = gym_operation_kind(operation, executor);
  if (kind < 0) return -kind;
  return guarded([&] {
    return gym_operation_started_k(kind, seconds_to_ns("queue_seconds", queue_seconds), queued,
                                   active);
  });
}

int gym_operation_finished_t(const char* operation, const char* executor, double duration_seconds,
                             const char* outcome, int64_t active) {
  const int kind = gym_operation_kind(operation, executor);
  if (kind < 0) return -kind;
  return guarded([&] {
    int out = kOutcomeNames.find(outcome);
    if (out < 0) out = int(parse_or_throw<gym::Outcome>("outcome", outcome, gym::kOutcomes));
    return gym_operation_finished_k(kind, seconds_to_ns("duration_seconds", duration_seconds), out,
                                    active);
  });
}

int gym_operation_queued(const char* operation, const char* executor) {
  return gym_operation_queued_t(operation, executor, nullptr);
}
int gym_operation_dequeued(const char* operation, const char* executor) {
  return gym_operation_dequeued_t(operation, executor, 0);
}
int gym_operation_started(const char* operation, const char* executor, double queue_seconds) {
  return gym_operation_started_t(operation, executor, queue_seconds, 0, nullptr);
}
int gym_operation_finished(const char* operation, const char* executor, double duration_seconds,
                           const char* outcome) {
  return gym_operation_finished_t(operation, executor, duration_seconds, outcome, 0);
}

int gym_declare_server(const char* name, const char* server_type) {
  return guarded([&] {
    if (name == nullptr || server_type == nullptr)
      throw std::invalid_argument("name and server_type must not be NULL");
    gym::declare_server(name, server_type);
    return GYM_OK;
  });
}

// A meter handle's two entry points, the same for each kind of meter:
// gym_<kind>_open (a handle for the server named, or the process's) and
// gym_<kind>_close.
#define GYM_METER_HANDLE(kind)                                       \
  int gym_##kind##_open(const char* server_name, gym_##kind** out) { \
    return open_meter(server_name, out);                             \
  }                                                                  \
  void gym_##kind##_close(gym_##kind* handle) {                      \
    delete handle;                                                   \
  }

GYM_METER_HANDLE(loop)     // gym_loop_open, gym_loop_close
GYM_METER_HANDLE(runtime)  // gym_runtime_open, gym_runtime_close
#undef GYM_METER_HANDLE

int gym_loop_beat(gym_loop* loop, int64_t lag_ns, int64_t due_in_ns) {
  return on_meter(loop, "loop", [&](auto& meter) {
    meter.beat(lag_ns, due_in_ns);
    return GYM_OK;
  });
}

int gym_loop_tasks(gym_loop* loop, int64_t tasks) {
  return on_meter(loop, "loop", [&](auto& meter) {
    meter.set_tasks(tasks);
    return GYM_OK;
  });
}

int gym_runtime_gc(gym_runtime* runtime, int generation, int64_t pause_ns) {
  return on_meter(runtime, "runtime", [&](auto& meter) {
    if (!meter.collected(generation, pause_ns))
      throw std::invalid_argument("unknown garbage-collector generation " +
                                  std::to_string(generation) + " (0, 1 or 2)");
    return GYM_OK;
  });
}

int gym_runtime_threads(gym_runtime* runtime, int64_t threads) {
  return on_meter(runtime, "runtime", [&](auto& meter) {
    meter.set_threads(threads);
    return GYM_OK;
  });
}

const char* gym_last_error(void) {
  return t_last_error.c_str();
}

}  // extern "C"
