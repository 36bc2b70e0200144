// MeteredSemaphore: a counting semaphore for threads that reports its limit,
// free slots, waiters, admissions, waits, admission timeouts and
// cancellations and the ages of its oldest waiter and holder (the
// gym_concurrency_* families) through the registry.
//
// Thread-safety: no concurrent call to any API of this type causes a data
// race. An uncontended acquire is one atomic subtract on the free-slot count
// (in process memory, so that no other process can change what the semaphore
// admits) and a compare-exchange claiming a slot of the holds' ages record
// (which also counts the admission) with a coarse clock read; a release is an
// atomic add and a compare-exchange. Only waiters touch the queue count and
// the mutex. A try_acquire() that meets another caller's subtract finding no
// slot may fail although a slot was just returned (the semaphore is at its
// limit then); acquire() then waits, and is woken.
//
// Holds' ages: a hold is remembered by the thread that took it (the last
// few per thread), so that release() on that thread ends that hold. A
// release on another thread ends the oldest hold instead (counts stay right;
// only which start is kept differs). SemaphoreGuard always ends its own.
//
// Fork-safety: as the registry's; a child inherits the semaphore's state.
//
// API (docs/api.md): MeteredSemaphore's public members and SemaphoreGuard
// (and, from gym/admission.h, the exceptions its waits end in).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string_view>

#include "gym/admission.h"
#include "gym/limit_meter.h"

namespace gym {

class MeteredSemaphore {
 public:
  using Duration = std::chrono::nanoseconds;

  // Throws std::invalid_argument for a bad limit, limit name or server name,
  // or a negative admission timeout.
  MeteredSemaphore(int64_t limit, Component component, std::string_view limit_name,
                   std::optional<std::string_view> server_name = std::nullopt,
                   std::optional<Duration> admission_timeout = std::nullopt,
                   SegmentWriter& writer = SegmentWriter::process());
  MeteredSemaphore(const MeteredSemaphore&) = delete;
  MeteredSemaphore& operator=(const MeteredSemaphore&) = delete;

  // Waits for a slot. Throws AdmissionTimeout once the admission timeout runs
  // out, AdmissionCancelled when `stop` is requested first.
  void acquire(std::stop_token stop = {});
  // Takes a slot if one is free now.
  bool try_acquire() noexcept;
  // Returns a slot. Throws std::logic_error, changing nothing, when no slot
  // is held.
  void release();

  // As acquire() and release(), with the hold's ticket in the caller's hands
  // (SemaphoreGuard): the release ends exactly that hold.
  int64_t acquire_ticket(std::stop_token stop = {});
  void release_ticket(int64_t hold);
  // As acquire() and acquire_ticket(), and a wait (when there is one) is its
  // wait-duration bucket's exemplar with `trace` (gym/trace_context.h).
  void acquire(const TraceContext& trace, std::stop_token stop = {});
  int64_t acquire_ticket(const TraceContext& trace, std::stop_token stop = {});

  int64_t limit() const { return meter_.limit(); }
  // Slots held now (a caller taking or giving one back may move the count
  // past its range for an instant: read within [0, limit]).
  int64_t active() const {
    const int64_t free = __atomic_load_n(meter_.available(), __ATOMIC_RELAXED);
    return meter_.limit() - std::clamp<int64_t>(free, 0, meter_.limit());
  }
  int64_t queued() const { return meter_.queued(); }
  std::optional<Duration> admission_timeout() const { return admission_timeout_; }
  const std::vector<std::pair<std::string, std::string>>& labels() const { return meter_.labels(); }

 private:
  bool take_free(bool locked) noexcept;
  int64_t acquire_ticket(std::stop_token stop, const TraceContext* trace);
  void return_slot();
  LimitMeter meter_;
  std::optional<Duration> admission_timeout_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  int64_t waiters_ = 0;  // under mu_; mirrored in waiting_ for release()
  alignas(64) int64_t waiting_ = 0;
};

// Holds one slot of a MeteredSemaphore for its lifetime.
class SemaphoreGuard {
 public:
  explicit SemaphoreGuard(MeteredSemaphore& s, std::stop_token stop = {})
      : s_(s), hold_(s_.acquire_ticket(std::move(stop))) {}
  ~SemaphoreGuard() { s_.release_ticket(hold_); }
  SemaphoreGuard(const SemaphoreGuard&) = delete;
  SemaphoreGuard& operator=(const SemaphoreGuard&) = delete;

 private:
  MeteredSemaphore& s_;
  int64_t hold_;
};

}  // namespace gym
