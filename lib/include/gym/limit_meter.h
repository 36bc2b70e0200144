// LimitMeter: the gym_concurrency_* series of one concurrency limit — its
// configured slots, free slots, waiters and admission failures — in the
// registry. MeteredSemaphore uses it for its own semaphore; the C ABI uses it
// for a language that keeps its own semaphore (asyncio), so both report the
// same numbers.
//
// The free-slot count is the semaphore's state, so it lives in process memory:
// the registry gets a copy (an atomic add per change). So does the number of
// waiters, so that a misused C ABI call can be refused without changing it. Nothing another
// process does to the registry file can change what the semaphore admits.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gym/contract.h"
#include "gym/segment_writer.h"

namespace gym {

class LimitMeter {
 public:
  // Throws std::invalid_argument naming the bad value: limit < 1, a limit
  // name outside [a-z][a-z0-9_]* or longer than 64, an empty or over-long
  // server name.
  LimitMeter(int64_t limit, Component component, std::string_view limit_name,
             std::optional<std::string_view> server_name, bool has_admission_timeout,
             SegmentWriter& writer);

  int64_t limit() const { return limit_; }
  // Free slots: the semaphore's own state, in process memory. Whoever
  // changes it with a compare-exchange reports the change with
  // published_available_add.
  int64_t* available() const { return &available_local_->value; }
  void published_available_add(int64_t delta) const { available_.add(delta); }
  // Moves `delta` slots between free and held, within [0, limit]; false,
  // changing nothing, when that would leave the range.
  bool move_available(int64_t delta) const;
  // Callers waiting: also process memory, mirrored to the registry.
  int64_t queued() const { return __atomic_load_n(&queued_local_->value, __ATOMIC_RELAXED); }
  void add_queued(int64_t delta) const;
  // One caller leaves the queue; false, changing nothing, when nobody waits.
  bool leave_queue() const;
  void count_timeout() const { timeouts_.add(); }
  void count_cancelled() const { cancelled_.add(); }
  // The labels this limit reports under, as (name, value).
  const std::vector<std::pair<std::string, std::string>>& labels() const { return labels_; }

 private:
  int64_t limit_;
  std::vector<std::pair<std::string, std::string>> labels_;
  Gauge limit_gauge_;
  Gauge available_;  // the registry's copy of *available()
  struct alignas(64) Slot {
    int64_t value;
  };
  std::unique_ptr<Slot> available_local_;
  std::unique_ptr<Slot> queued_local_;
  Gauge queued_;  // the registry's copy of queued()
  Counter timeouts_;
  Counter cancelled_;
};

}  // namespace gym
