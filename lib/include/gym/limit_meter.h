// LimitMeter: the gym_concurrency_* series of one concurrency limit — its
// configured slots, free slots, waiters, admissions, waits and the ages of
// the oldest waiter and holder — in the registry. MeteredSemaphore uses it for
// its own semaphore; the C ABI uses it for a language that keeps its own
// semaphore (asyncio), so both report the same numbers.
//
// The free-slot count is the semaphore's state, so it lives in process memory.
// The registry learns of holds from the holds' ages record: one slot claimed
// per hold with its start time (and a count for holds beyond its slots), so
// that the exporter reports held = the holds in progress and free = limit -
// held. (The registry's `available` gauge holds the limit and is not
// updated: readers subtract the holds, and a writer of format 1 or 2, which
// updated it, has no holds record.) The number of waiters is process memory
// too, mirrored to the registry's queue gauge, so that a misused C ABI call
// can be refused without changing it. Nothing another process does to the
// registry file can change what the semaphore admits.
//
// Every event that starts something returns a ticket (AgeSlots) for the event
// that ends it; a ticket of 0 (unknown) ends some other one, keeping counts
// right.
//
// Thread-safety: every method may be called from any thread.
//
// Internal (docs/api.md): installed because metered_semaphore.h includes it.
#pragma once

#include <algorithm>
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
  // Free slots: the semaphore's own state, in process memory, changed with
  // a compare-exchange by whoever takes or returns a slot.
  int64_t* available() const { return &available_local_->value; }
  // Moves `delta` slots between free and held, within [0, limit]; false,
  // changing nothing, when that would leave the range.
  bool move_available(int64_t delta) const;

  // A slot was taken without waiting: a hold starting now (the holds' ages
  // record counts it as an admission). Returns the hold's ticket.
  int64_t admitted_at_once() const noexcept { return holds_.begin(segment::stamp_now_ns()); }
  // A caller starts waiting (joins the queue). Returns the wait's ticket.
  int64_t wait_started() const;
  // The waiter of `wait` got a slot: its hold starts, it leaves the queue
  // and its wait is recorded. Returns the hold's ticket; nullopt, changing
  // nothing, when nobody waits. With a valid `trace` (may be null), the wait
  // is its bucket's exemplar (the same for the calls below).
  std::optional<int64_t> wait_admitted(int64_t wait, const TraceContext* trace = nullptr) const;
  // The waiter of `wait` left without a slot (timeout or cancelled); false,
  // changing nothing, when nobody waits.
  bool wait_failed(int64_t wait, WaitOutcome outcome, const TraceContext* trace = nullptr) const;
  // The holder of `hold` handed its slot straight to the waiter of `wait`:
  // one leaves the queue, and the hold passes on with no instant at which the
  // slot shows as free. Returns the new hold's ticket; nullopt, changing
  // nothing, when nobody waits.
  std::optional<int64_t> handed_off(int64_t hold, int64_t wait,
                                    const TraceContext* trace = nullptr) const;
  // The hold of `hold` ended (the slot is back); its time is added to the
  // held time.
  void released(int64_t hold) const noexcept { held(holds_.end(hold)); }

  // Callers waiting: process memory, mirrored to the registry.
  int64_t queued() const { return __atomic_load_n(&queued_local_->value, __ATOMIC_RELAXED); }
  void add_queued(int64_t delta) const;
  // One caller leaves the queue; false, changing nothing, when nobody waits.
  bool leave_queue() const;
  // The labels this limit reports under, as (name, value).
  const std::vector<std::pair<std::string, std::string>>& labels() const { return labels_; }
  // The ages records (for tests).
  const AgeSlots& holds() const { return holds_; }
  const AgeSlots& waits() const { return waits_; }

 private:
  // A hold that began at `start` (0: unknown, not counted) ends now.
  void held(int64_t start) const noexcept {
    if (start > 0) hold_ns_.add(uint64_t(std::max<int64_t>(segment::stamp_now_ns() - start, 0)));
  }
  void observe_wait(int64_t wait, WaitOutcome outcome, const TraceContext* trace) const;
  // The wait-duration histogram of `outcome`, registered at its first wait:
  // a limit's waits that never happen take no space and no series.
  const Histogram& wait_duration(WaitOutcome outcome) const;

  int64_t limit_;
  std::vector<std::pair<std::string, std::string>> labels_;
  Gauge limit_gauge_;
  Gauge available_;  // the limit (see above)
  struct alignas(64) Slot {
    int64_t value;
  };
  std::unique_ptr<Slot> available_local_;
  std::unique_ptr<Slot> queued_local_;
  Gauge queued_;  // the registry's copy of queued()
  AgeSlots holds_;
  AgeSlots waits_;
  SegmentWriter& writer_;
  LazyHistogram waits_duration_[kWaitOutcomes.size()];
  Counter timeouts_;
  Counter cancelled_;
  Counter hold_ns_;  // gym_concurrency_hold_seconds_total, in nanoseconds
};

}  // namespace gym
