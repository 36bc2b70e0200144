#include "gym/metered_semaphore.h"

namespace gym {

MeteredSemaphore::MeteredSemaphore(int64_t limit, Component component, std::string_view limit_name,
                                   std::optional<std::string_view> server_name,
                                   std::optional<Duration> admission_timeout, SegmentWriter& writer)
    : meter_((admission_timeout && admission_timeout->count() < 0)
                 ? throw std::invalid_argument("admission timeout must not be negative")
                 : limit,
             component, limit_name, server_name, admission_timeout.has_value(), writer),
      admission_timeout_(admission_timeout) {}

void MeteredSemaphore::acquire(std::stop_token stop) {
  if (try_acquire()) return;
  const auto deadline = admission_timeout_ ? std::chrono::steady_clock::now() + *admission_timeout_
                                           : std::chrono::steady_clock::time_point::max();
  std::unique_lock<std::mutex> lock(mu_);
  ++waiters_;
  __atomic_store_n(&waiting_, waiters_, __ATOMIC_SEQ_CST);
  meter_.add_queued(1);
  auto leave_queue = [&] {
    --waiters_;
    __atomic_store_n(&waiting_, waiters_, __ATOMIC_SEQ_CST);
    meter_.add_queued(-1);
  };
  for (;;) {
    if (try_acquire()) {
      leave_queue();
      return;
    }
    if (stop.stop_requested()) {
      leave_queue();
      meter_.count_cancelled();
      throw AdmissionCancelled("cancelled while waiting for a slot of " +
                               meter_.labels()[1].second);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      leave_queue();
      meter_.count_timeout();
      throw AdmissionTimeout("no slot of " + meter_.labels()[1].second +
                             " within the admission timeout");
    }
    const int64_t* a = meter_.available();
    auto free_slot = [a] { return __atomic_load_n(a, __ATOMIC_SEQ_CST) > 0; };
    if (admission_timeout_)
      cv_.wait_until(lock, stop, deadline, free_slot);
    else
      cv_.wait(lock, stop, free_slot);
  }
}

void MeteredSemaphore::release() {
  int64_t* a = meter_.available();
  int64_t v = __atomic_load_n(a, __ATOMIC_RELAXED);
  do {
    if (v >= meter_.limit())
      throw std::logic_error("release of " + meter_.labels()[1].second + " without a slot held");
  } while (!__atomic_compare_exchange_n(a, &v, v + 1, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  meter_.published_available_add(1);
  // A waiter publishes itself (waiting_) before its last look at the free
  // slots, and we published the slot before this look at waiting_: one of us
  // sees the other.
  if (__atomic_load_n(&waiting_, __ATOMIC_SEQ_CST) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_one();
  }
}

}  // namespace gym
