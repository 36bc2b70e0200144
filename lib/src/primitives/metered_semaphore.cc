#include "gym/metered_semaphore.h"

namespace gym {

namespace {
// The holds this thread took last (tickets by semaphore), so that release()
// ends the caller's own hold. Constant-initialized and initial-exec: one load
// to reach.
struct HeldTicket {
  const void* owner;
  int64_t ticket;
};
constexpr uint32_t kHeldTickets = 4;
constinit thread_local HeldTicket t_held[kHeldTickets]
    __attribute__((tls_model("initial-exec"))) = {};
constinit thread_local uint32_t t_held_count __attribute__((tls_model("initial-exec"))) = 0;

void push_held(const void* owner, int64_t ticket) noexcept {
  uint32_t n = t_held_count;
  if (n == kHeldTickets) {  // forget the oldest: its release ends the oldest hold
    for (uint32_t i = 1; i < kHeldTickets; ++i) t_held[i - 1] = t_held[i];
    --n;
  }
  t_held[n] = {owner, ticket};
  t_held_count = n + 1;
}

// This thread's latest ticket for `owner`, forgotten; 0 when it has none.
int64_t pop_held(const void* owner) noexcept {
  for (uint32_t i = t_held_count; i-- > 0;) {
    if (t_held[i].owner != owner) continue;
    const int64_t ticket = t_held[i].ticket;
    for (uint32_t j = i + 1; j < t_held_count; ++j) t_held[j - 1] = t_held[j];
    --t_held_count;
    return ticket;
  }
  return 0;
}
}  // namespace

MeteredSemaphore::MeteredSemaphore(int64_t limit, Component component, std::string_view limit_name,
                                   std::optional<std::string_view> server_name,
                                   std::optional<Duration> admission_timeout, SegmentWriter& writer)
    : meter_((admission_timeout && admission_timeout->count() < 0)
                 ? throw std::invalid_argument("admission timeout must not be negative")
                 : limit,
             component, limit_name, server_name, admission_timeout.has_value(), writer),
      admission_timeout_(admission_timeout) {}

// Takes a free slot with one atomic subtract: two threads taking and
// returning slots made a compare-exchange loop fail and retry, each retry a
// trip of the count's cache line between them. A subtract that finds no slot
// (or a count above the limit: a refused release not yet undone, below) adds
// it back. For that instant the count reads one lower, so another caller may
// find no slot where one was free; it then waits, and the add-back wakes a
// waiter as a release does. `locked`: the caller holds mu_ (a waiter).
bool MeteredSemaphore::take_free(bool locked) noexcept {
  int64_t* a = meter_.available();
  const int64_t before = __atomic_fetch_sub(a, 1, __ATOMIC_SEQ_CST);
  if (before > 0 && before <= meter_.limit()) return true;
  __atomic_fetch_add(a, 1, __ATOMIC_SEQ_CST);
  // As in release_ticket: we published the slot before this look at waiting_.
  if (locked) {
    if (waiters_ > 1) cv_.notify_one();  // another waiter than the caller
  } else if (__atomic_load_n(&waiting_, __ATOMIC_SEQ_CST) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_one();
  }
  return false;
}

bool MeteredSemaphore::try_acquire() noexcept {
  if (!take_free(/*locked=*/false)) return false;
  push_held(this, meter_.admitted_at_once());
  return true;
}

void MeteredSemaphore::acquire(std::stop_token stop) {
  push_held(this, acquire_ticket(std::move(stop), nullptr));
}

void MeteredSemaphore::acquire(const TraceContext& trace, std::stop_token stop) {
  push_held(this, acquire_ticket(std::move(stop), &trace));
}

int64_t MeteredSemaphore::acquire_ticket(std::stop_token stop) {
  return acquire_ticket(std::move(stop), nullptr);
}

int64_t MeteredSemaphore::acquire_ticket(const TraceContext& trace, std::stop_token stop) {
  return acquire_ticket(std::move(stop), &trace);
}

int64_t MeteredSemaphore::acquire_ticket(std::stop_token stop, const TraceContext* trace) {
  if (take_free(/*locked=*/false)) return meter_.admitted_at_once();
  const auto deadline = admission_timeout_ ? std::chrono::steady_clock::now() + *admission_timeout_
                                           : std::chrono::steady_clock::time_point::max();
  std::unique_lock<std::mutex> lock(mu_);
  ++waiters_;
  __atomic_store_n(&waiting_, waiters_, __ATOMIC_SEQ_CST);
  const int64_t wait = meter_.wait_started();
  auto leave = [&] {
    --waiters_;
    __atomic_store_n(&waiting_, waiters_, __ATOMIC_SEQ_CST);
  };
  for (;;) {
    if (take_free(/*locked=*/true)) {
      leave();
      return meter_.wait_admitted(wait, trace).value_or(0);
    }
    if (stop.stop_requested()) {
      leave();
      meter_.wait_failed(wait, WaitOutcome::kCancelled, trace);
      throw AdmissionCancelled("cancelled while waiting for a slot of " +
                               meter_.labels()[1].second);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      leave();
      meter_.wait_failed(wait, WaitOutcome::kTimeout, trace);
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

// Puts a slot back as free with one atomic add (see take_free); throws,
// changing nothing, when none is held: an add past the limit is taken back,
// and a caller that meets the count above the limit in between takes no slot.
void MeteredSemaphore::return_slot() {
  int64_t* a = meter_.available();
  if (__atomic_fetch_add(a, 1, __ATOMIC_SEQ_CST) < meter_.limit()) return;
  __atomic_fetch_sub(a, 1, __ATOMIC_SEQ_CST);
  throw std::logic_error("release of " + meter_.labels()[1].second + " without a slot held");
}

void MeteredSemaphore::release() {
  release_ticket(pop_held(this));
}

void MeteredSemaphore::release_ticket(int64_t hold) {
  return_slot();
  meter_.released(hold);
  // A waiter publishes itself (waiting_) before its last look at the free
  // slots, and we published the slot before this look at waiting_: one of us
  // sees the other.
  if (__atomic_load_n(&waiting_, __ATOMIC_SEQ_CST) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_one();
  }
}

}  // namespace gym
