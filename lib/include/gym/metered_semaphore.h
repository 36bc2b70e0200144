// MeteredSemaphore: a counting semaphore for threads that reports its limit,
// free slots, waiters, admission timeouts and cancellations (the
// gym_concurrency_* families) through the registry.
//
// Thread-safety: no concurrent call to any API of this type causes a data
// race. An uncontended acquire or release is one atomic compare-exchange on
// the free-slot count (in process memory, so that no other process can change
// what the semaphore admits) and one atomic add on its registry copy; only
// waiters touch the queue count and the mutex.
//
// Fork-safety: as the registry's; a child inherits the semaphore's state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string_view>

#include "gym/limit_meter.h"

namespace gym {

// A wait for a slot that ended without one.
class AdmissionError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};
// No slot became free within the admission timeout.
class AdmissionTimeout : public AdmissionError {
  using AdmissionError::AdmissionError;
};
// The wait was cancelled (its stop_token) before a slot was free.
class AdmissionCancelled : public AdmissionError {
  using AdmissionError::AdmissionError;
};

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
  bool try_acquire() noexcept {
    int64_t* a = meter_.available();
    int64_t v = __atomic_load_n(a, __ATOMIC_RELAXED);
    while (v > 0) {
      if (__atomic_compare_exchange_n(a, &v, v - 1, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
        meter_.published_available_add(-1);
        return true;
      }
    }
    return false;
  }
  // Returns a slot. Throws std::logic_error, changing nothing, when no slot
  // is held.
  void release();

  int64_t limit() const { return meter_.limit(); }
  int64_t active() const {
    return meter_.limit() - __atomic_load_n(meter_.available(), __ATOMIC_RELAXED);
  }
  int64_t queued() const { return meter_.queued(); }
  std::optional<Duration> admission_timeout() const { return admission_timeout_; }
  const std::vector<std::pair<std::string, std::string>>& labels() const { return meter_.labels(); }

 private:
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
  explicit SemaphoreGuard(MeteredSemaphore& s, std::stop_token stop = {}) : s_(s) {
    s_.acquire(std::move(stop));
  }
  ~SemaphoreGuard() { s_.release(); }
  SemaphoreGuard(const SemaphoreGuard&) = delete;
  SemaphoreGuard& operator=(const SemaphoreGuard&) = delete;

 private:
  MeteredSemaphore& s_;
};

}  // namespace gym
