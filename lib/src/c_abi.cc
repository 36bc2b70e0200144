// The C ABI (gym_metrics.h) over the C++ primitives.
#include "gym_metrics.h"

#include <cmath>
#include <new>
#include <stdexcept>
#include <string>

#include "gym/limit_meter.h"
#include "gym/resources_operation.h"
#include "gym/server_identity.h"

struct gym_limit {
  gym::LimitMeter meter;
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

int64_t seconds_to_ns(const char* what, double s) {
  if (!std::isfinite(s) || s < 0)
    throw std::invalid_argument(std::string(what) + " must be a finite number >= 0");
  return static_cast<int64_t>(std::llround(std::min(s, 9.2e9) * 1e9));
}

// Moves one unit between free slots and held ones, within [0, limit].
bool move_slot(const gym_limit* l, int64_t delta) {
  return l->meter.move_available(delta);
}

int take_slot(gym_limit* l) {
  if (!move_slot(l, -1))
    return fail(GYM_ESTATE,
                "a slot was taken but all " + std::to_string(l->meter.limit()) + " are held");
  return GYM_OK;
}

int leave_queue(gym_limit* l) {
  if (!l->meter.leave_queue()) return fail(GYM_ESTATE, "no caller is waiting");
  return GYM_OK;
}

// Operations in flight per (operation, executor), counted in process memory
// so that an event that does not fit (started without queued, finished
// without started) is refused before anything changes. The registry's gauges
// follow these counts.
struct OperationCounts {
  int64_t queued = 0;
  int64_t active = 0;
};
OperationCounts g_operations[gym::kOperations.size()][gym::kExecutors.size()];

// Decrements *v when it is positive; false, changing nothing, otherwise.
bool take_one(int64_t* v) {
  int64_t n = __atomic_load_n(v, __ATOMIC_RELAXED);
  do {
    if (n <= 0) return false;
  } while (!__atomic_compare_exchange_n(v, &n, n - 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return true;
}

OperationCounts& counts(gym::Operation op, gym::Executor ex) {
  return g_operations[static_cast<size_t>(op)][static_cast<size_t>(ex)];
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

int gym_limit_acquired(gym_limit* l) {
  if (l == nullptr) return fail(GYM_EINVAL, "limit is NULL");
  return take_slot(l);
}

int gym_limit_wait_started(gym_limit* l) {
  if (l == nullptr) return fail(GYM_EINVAL, "limit is NULL");
  l->meter.add_queued(1);
  return GYM_OK;
}

int gym_limit_wait_admitted(gym_limit* l) {
  if (l == nullptr) return fail(GYM_EINVAL, "limit is NULL");
  if (int rc = leave_queue(l); rc != GYM_OK) return rc;
  if (int rc = take_slot(l); rc != GYM_OK) {
    l->meter.add_queued(1);  // back as it was
    return rc;
  }
  return GYM_OK;
}

int gym_limit_wait_timed_out(gym_limit* l) {
  if (l == nullptr) return fail(GYM_EINVAL, "limit is NULL");
  if (int rc = leave_queue(l); rc != GYM_OK) return rc;
  l->meter.count_timeout();
  return GYM_OK;
}

int gym_limit_wait_cancelled(gym_limit* l) {
  if (l == nullptr) return fail(GYM_EINVAL, "limit is NULL");
  if (int rc = leave_queue(l); rc != GYM_OK) return rc;
  l->meter.count_cancelled();
  return GYM_OK;
}

int gym_limit_released(gym_limit* l) {
  if (l == nullptr) return fail(GYM_EINVAL, "limit is NULL");
  if (!move_slot(l, +1)) return fail(GYM_ESTATE, "release without a slot held");
  return GYM_OK;
}

int64_t gym_limit_active(const gym_limit* l) {
  return l == nullptr ? -1
                      : l->meter.limit() - __atomic_load_n(l->meter.available(), __ATOMIC_RELAXED);
}

int64_t gym_limit_queued(const gym_limit* l) {
  return l == nullptr ? -1 : l->meter.queued();
}

int gym_operation_queued(const char* operation, const char* executor) {
  return guarded([&] {
    const auto op = parse_or_throw<gym::Operation>("operation", operation, gym::kOperations);
    const auto ex = parse_or_throw<gym::Executor>("executor", executor, gym::kExecutors);
    __atomic_add_fetch(&counts(op, ex).queued, 1, __ATOMIC_RELAXED);
    gym::OperationMetrics::process().cell(op, ex).queued.add(1);
    return GYM_OK;
  });
}

int gym_operation_dequeued(const char* operation, const char* executor) {
  return guarded([&] {
    const auto op = parse_or_throw<gym::Operation>("operation", operation, gym::kOperations);
    const auto ex = parse_or_throw<gym::Executor>("executor", executor, gym::kExecutors);
    if (!take_one(&counts(op, ex).queued)) return fail(GYM_ESTATE, "no such operation is queued");
    gym::OperationMetrics::process().cell(op, ex).queued.add(-1);
    return GYM_OK;
  });
}

int gym_operation_started(const char* operation, const char* executor, double queue_seconds) {
  return guarded([&] {
    const auto op = parse_or_throw<gym::Operation>("operation", operation, gym::kOperations);
    const auto ex = parse_or_throw<gym::Executor>("executor", executor, gym::kExecutors);
    const int64_t ns = seconds_to_ns("queue_seconds", queue_seconds);
    if (!take_one(&counts(op, ex).queued)) return fail(GYM_ESTATE, "no such operation is queued");
    __atomic_add_fetch(&counts(op, ex).active, 1, __ATOMIC_RELAXED);
    const auto& cell = gym::OperationMetrics::process().cell(op, ex);
    cell.queue_duration.observe(ns);
    cell.queued.add(-1);
    cell.active.add(1);
    return GYM_OK;
  });
}

int gym_operation_finished(const char* operation, const char* executor, double duration_seconds,
                           const char* outcome) {
  return guarded([&] {
    const auto op = parse_or_throw<gym::Operation>("operation", operation, gym::kOperations);
    const auto ex = parse_or_throw<gym::Executor>("executor", executor, gym::kExecutors);
    const auto out = parse_or_throw<gym::Outcome>("outcome", outcome, gym::kOutcomes);
    const int64_t ns = seconds_to_ns("duration_seconds", duration_seconds);
    if (!take_one(&counts(op, ex).active)) return fail(GYM_ESTATE, "no such operation is running");
    const auto& cell = gym::OperationMetrics::process().cell(op, ex);
    cell.active.add(-1);
    cell.duration[static_cast<size_t>(out)].observe(ns);
    return GYM_OK;
  });
}

int gym_declare_server(const char* name, const char* server_type) {
  return guarded([&] {
    if (name == nullptr || server_type == nullptr)
      throw std::invalid_argument("name and server_type must not be NULL");
    gym::declare_server(name, server_type);
    return GYM_OK;
  });
}

const char* gym_last_error(void) {
  return t_last_error.c_str();
}

}  // extern "C"
