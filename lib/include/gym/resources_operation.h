// The resources-operation scope: bounded work (a verifier subprocess, a judge
// call) entered over any limit with acquire()/release(). While waiting it
// counts as queued; every wait that ends is recorded in the queue duration,
// by how it ended (admitted, or abandoned when the limit's acquire throws:
// timeout for AdmissionTimeout, cancelled for anything else), so that the
// time waited adds up to the number queued over time (Little's law); inside
// it counts as active; on exit it records the duration with the outcome (the
// gym_resources_operation_* families).
//
//   gym::ResourcesOperation op(semaphore, gym::Operation::kVerify,
//                              gym::Executor::kSubprocess);
//   if (run_verifier() == kTimedOut) op.set_outcome(gym::Outcome::kTimeout);
//
// The outcome is the one set, else `cancelled` when an exception leaves the
// scope after its stop_token was requested, else `error` for any other
// exception, else `ok`. Durations use the monotonic clock (steady_clock is
// CLOCK_MONOTONIC on Linux, the clock of the ages' start times).
//
// Thread-safety: OperationMetrics may be shared by all threads; one
// ResourcesOperation belongs to the thread that made it.
//
// API (docs/api.md): ResourcesOperation, the AcquireRelease concept and
// OperationMetrics (its constructor and process()); gym::detail is not.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "gym/admission.h"
#include "gym/contract.h"
#include "gym/segment_writer.h"

namespace gym {

namespace detail {
// The registry handles of one (operation, executor): internal, no
// compatibility promise (docs/api.md).
struct OperationCell {
  Gauge queued;
  Gauge active;
  AgeSlots queued_ages;  // gym_resources_operation_oldest_queued_seconds
  AgeSlots active_ages;  // gym_resources_operation_oldest_active_seconds
  // The duration histogram of `outcome`, registered when the first
  // operation ends with it: outcomes that never happen take no space.
  const Histogram& duration(Outcome outcome) const;
  // The queue duration histogram of waits that ended so, registered at the
  // first: an operation that never times out has no such series. Inline:
  // every operation takes it (the duration's is one of five outcomes).
  const Histogram& queue_duration(WaitOutcome how) const {
    return queue_durations[static_cast<size_t>(how)].get(
        [this, how] { return make_queue_duration(how); });
  }
  Histogram make_queue_duration(WaitOutcome how) const;

  SegmentWriter* writer = nullptr;
  std::vector<Label> labels;        // views of label_values, outcome last
  std::vector<std::string> values;  // the labels' values
  std::array<LazyHistogram, kOutcomes.size()> durations;
  std::array<LazyHistogram, kWaitOutcomes.size()> queue_durations;
};

// How a wait that threw ended: timeout for AdmissionTimeout, else cancelled.
inline WaitOutcome abandoned_wait(const std::exception_ptr& e) noexcept {
  try {
    std::rethrow_exception(e);
  } catch (const AdmissionTimeout&) {
    return WaitOutcome::kTimeout;
  } catch (...) {
    return WaitOutcome::kCancelled;
  }
}
}  // namespace detail

// The registry handles behind resources operations, for one writer, each
// registered on first use (so that only combinations that happen report).
// API: the constructor and process(), to hand to ResourcesOperation; cell()
// is internal (the C ABI's and ResourcesOperation's).
class OperationMetrics {
 public:
  // Series of an instance of one's own carry the server declared when each
  // registers (declare_server does not wait for them).
  explicit OperationMetrics(SegmentWriter& writer) : writer_(writer) {}
  // For SegmentWriter::process(); what ResourcesOperation and the C ABI use.
  // Never destroyed.
  static OperationMetrics& process();

  using Cell = detail::OperationCell;
  const Cell& cell(Operation op, Executor ex) {
    Slot& s = cells_[static_cast<size_t>(op) * kExecutors.size() + static_cast<size_t>(ex)];
    const Cell* c = s.cell.load(std::memory_order_acquire);
    return c != nullptr ? *c : register_cell(s, op, ex);
  }

 private:
  struct Slot {
    std::atomic<const Cell*> cell{nullptr};
  };
  const Cell& register_cell(Slot& s, Operation op, Executor ex);
  // process()'s, in a forked child: cells register again, with the child's
  // identity (operations in flight keep theirs: cells live as long as this).
  void forget_cells_after_fork() noexcept;
  SegmentWriter& writer_;
  bool process_ = false;  // process()'s: its series take the declared identity
  std::mutex mu_;
  std::vector<std::unique_ptr<Cell>> owned_;
  std::array<Slot, kOperations.size() * kExecutors.size()> cells_;
};

template <class Limit>
concept AcquireRelease = requires(Limit& l) {
  l.acquire();
  l.release();
};

template <AcquireRelease Limit>
class ResourcesOperation {
 public:
  using Clock = std::chrono::steady_clock;

  // Waits for `limit` (passing `stop` to it when it takes one); an exception
  // from the wait propagates, its wait recorded as abandoned.
  ResourcesOperation(Limit& limit, Operation op, Executor ex, std::stop_token stop = {},
                     OperationMetrics& metrics = OperationMetrics::process())
      : limit_(limit), cell_(metrics.cell(op, ex)), stop_(std::move(stop)) {
    enter();
  }
  // The same; the operation's duration is its bucket's exemplar with
  // `trace` (gym/trace_context.h) when that is valid.
  ResourcesOperation(Limit& limit, Operation op, Executor ex, const TraceContext& trace,
                     std::stop_token stop = {},
                     OperationMetrics& metrics = OperationMetrics::process())
      : limit_(limit), cell_(metrics.cell(op, ex)), stop_(std::move(stop)), trace_(trace) {
    enter();
  }

  ~ResourcesOperation() {
    const auto ran = (Clock::now() - started_).count();
    cell_.active_ages.end(active_ticket_);
    cell_.active.add(-1);
    Outcome outcome = Outcome::kOk;
    if (outcome_) {
      outcome = *outcome_;
    } else if (std::uncaught_exceptions() > exceptions_) {
      outcome = stop_.stop_requested() ? Outcome::kCancelled : Outcome::kError;
    }
    if (trace_)
      cell_.duration(outcome).observe(ran, *trace_);
    else
      cell_.duration(outcome).observe(ran);
    limit_.release();
  }

  ResourcesOperation(const ResourcesOperation&) = delete;
  ResourcesOperation& operator=(const ResourcesOperation&) = delete;

  void set_outcome(Outcome outcome) { outcome_ = outcome; }
  std::optional<Outcome> outcome() const { return outcome_; }

 private:
  void enter() {
    Limit& limit = limit_;
    // Admitted at once: the wait is zero, and nothing was ever queued.
    if constexpr (requires { limit.try_acquire(); }) {
      if (limit.try_acquire()) {
        started_ = Clock::now();
        cell_.queue_duration(WaitOutcome::kAdmitted).observe(0);
        active_ticket_ = cell_.active_ages.begin(started_.time_since_epoch().count());
        cell_.active.add(1);
        exceptions_ = std::uncaught_exceptions();
        return;
      }
    }
    cell_.queued.add(1);
    const Clock::time_point queued_at = Clock::now();
    const int64_t queued_ticket = cell_.queued_ages.begin(queued_at.time_since_epoch().count());
    try {
      if constexpr (requires { limit.acquire(stop_); })
        limit.acquire(stop_);
      else
        limit.acquire();
    } catch (...) {
      cell_.queue_duration(detail::abandoned_wait(std::current_exception()))
          .observe((Clock::now() - queued_at).count());
      cell_.queued_ages.end(queued_ticket);
      cell_.queued.add(-1);
      throw;
    }
    started_ = Clock::now();
    cell_.queue_duration(WaitOutcome::kAdmitted).observe((started_ - queued_at).count());
    active_ticket_ = cell_.active_ages.begin(started_.time_since_epoch().count());
    cell_.queued_ages.end(queued_ticket);
    cell_.queued.add(-1);
    cell_.active.add(1);
    exceptions_ = std::uncaught_exceptions();
  }
  static_assert(std::is_same_v<Clock::duration, std::chrono::nanoseconds>);
  Limit& limit_;
  const detail::OperationCell& cell_;
  std::stop_token stop_;
  Clock::time_point started_;
  int64_t active_ticket_ = 0;
  int exceptions_ = 0;
  std::optional<Outcome> outcome_;
  std::optional<TraceContext> trace_;
};

}  // namespace gym
