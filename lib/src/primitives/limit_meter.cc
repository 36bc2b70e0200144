#include "gym/limit_meter.h"

#include <time.h>

#include <algorithm>
#include <stdexcept>

namespace gym {

namespace {
std::vector<std::pair<std::string, std::string>> limit_labels(
    int64_t limit, Component component, std::string_view limit_name,
    std::optional<std::string_view> server_name) {
  if (limit < 1)
    throw std::invalid_argument("concurrency limit must be at least 1, got " +
                                std::to_string(limit));
  if (static_cast<size_t>(component) >= kComponents.size())
    throw std::invalid_argument("unknown concurrency component " +
                                std::to_string(static_cast<int>(component)));
  if (!valid_limit_name(limit_name))
    throw std::invalid_argument("limit name '" + std::string(limit_name) +
                                "' must match [a-z][a-z0-9_]* and be at most 64 characters");
  std::vector<std::pair<std::string, std::string>> labels = {
      {std::string(label::kComponent), std::string(to_string(component))},
      {std::string(label::kLimitName), std::string(limit_name)}};
  if (server_name) {
    if (!valid_server_name(*server_name))
      throw std::invalid_argument("server name '" + std::string(*server_name) +
                                  "' must be 1 to 128 bytes");
    labels.emplace_back(std::string(label::kServerName), std::string(*server_name));
  }
  return labels;
}

std::vector<Label> views(const std::vector<std::pair<std::string, std::string>>& labels) {
  std::vector<Label> out;
  for (const auto& [k, v] : labels) out.push_back({k, v});
  return out;
}
}  // namespace

LimitMeter::LimitMeter(int64_t limit, Component component, std::string_view limit_name,
                       std::optional<std::string_view> server_name, bool has_admission_timeout,
                       SegmentWriter& writer)
    : limit_(limit),
      labels_(limit_labels(limit, component, limit_name, server_name)),
      available_local_(new Slot{limit}),
      queued_local_(new Slot{0}),
      writer_(writer) {
  std::vector<Label> l = views(labels_);
  limit_gauge_ = writer.gauge(family::kConcurrencyLimit, l);
  available_ = writer.gauge(family::kConcurrencyAvailable, l);
  queued_ = writer.gauge(family::kConcurrencyQueueDepth, l);
  holds_ = writer.ages(family::kConcurrencyOldestHold, l);
  waits_ = writer.ages(family::kConcurrencyOldestWait, l);
  limit_gauge_.set(limit);
  available_.set(limit);
  // The timeouts series exists only for a limit that can time out.
  if (has_admission_timeout) timeouts_ = writer.counter(family::kAdmissionTimeouts, l);
  cancelled_ = writer.counter(family::kAdmissionCancelled, l);
  hold_ns_ = writer.counter(family::kConcurrencyHoldSeconds, l, double(kNanosPerSecond));
}

const Histogram& LimitMeter::wait_duration(WaitOutcome outcome) const {
  const auto i = static_cast<size_t>(outcome);
  return waits_duration_[i].get([&] {
    std::vector<Label> l = views(labels_);
    l.push_back({label::kWaitOutcome, kWaitOutcomes[i]});
    return writer_.histogram(family::kConcurrencyWaitDuration, l, kOperationBoundsNs,
                             double(kNanosPerSecond), /*native=*/true);
  });
}

bool LimitMeter::move_available(int64_t delta) const {
  int64_t* a = available();
  int64_t v = __atomic_load_n(a, __ATOMIC_RELAXED);
  do {
    const int64_t next = v + delta;
    if (next < 0 || next > limit_) return false;
  } while (
      !__atomic_compare_exchange_n(a, &v, v + delta, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  return true;
}

int64_t LimitMeter::wait_started() const {
  add_queued(1);
  return waits_.begin(segment::precise_now_ns());
}

void LimitMeter::observe_wait(int64_t wait, WaitOutcome outcome, const TraceContext* trace) const {
  waits_.end(wait);
  const int64_t start = segment::ticket_start(wait);
  const int64_t waited = start > 0 ? std::max<int64_t>(segment::precise_now_ns() - start, 0) : 0;
  if (trace != nullptr)
    wait_duration(outcome).observe(waited, *trace);
  else
    wait_duration(outcome).observe(waited);
}

std::optional<int64_t> LimitMeter::wait_admitted(int64_t wait, const TraceContext* trace) const {
  // The hold first, then the queue: a scrape in between sees one more slot
  // held and the caller still queued, never a free slot beside a queue.
  const int64_t hold = holds_.begin(segment::stamp_now_ns());
  if (!leave_queue()) {
    holds_.end(hold);
    return std::nullopt;
  }
  observe_wait(wait, WaitOutcome::kAdmitted, trace);
  return hold;
}

bool LimitMeter::wait_failed(int64_t wait, WaitOutcome outcome, const TraceContext* trace) const {
  if (!leave_queue()) return false;
  observe_wait(wait, outcome, trace);
  if (outcome == WaitOutcome::kTimeout) timeouts_.add();
  if (outcome == WaitOutcome::kCancelled) cancelled_.add();
  return true;
}

std::optional<int64_t> LimitMeter::handed_off(int64_t hold, int64_t wait,
                                              const TraceContext* trace) const {
  if (!leave_queue()) return std::nullopt;
  const int64_t now = segment::stamp_now_ns();
  // Ticket 0 ends some other hold (as restart() would), whose start end()
  // tells; a ticket says its own.
  const int64_t ended = hold != 0 ? segment::ticket_start(hold) : holds_.end(0);
  const int64_t next = hold != 0 ? holds_.restart(hold, now) : holds_.begin(now);
  held(ended);
  observe_wait(wait, WaitOutcome::kAdmitted, trace);
  return next;
}

void LimitMeter::add_queued(int64_t delta) const {
  __atomic_add_fetch(&queued_local_->value, delta, __ATOMIC_RELAXED);
  queued_.add(delta);
}

bool LimitMeter::leave_queue() const {
  int64_t* q = &queued_local_->value;
  int64_t v = __atomic_load_n(q, __ATOMIC_RELAXED);
  do {
    if (v <= 0) return false;
  } while (!__atomic_compare_exchange_n(q, &v, v - 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  queued_.add(-1);
  return true;
}

}  // namespace gym
