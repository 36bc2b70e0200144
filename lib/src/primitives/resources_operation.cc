#include "gym/resources_operation.h"

#include <pthread.h>

#include <string>
#include <vector>

#include "gym/server_identity.h"

namespace gym {

OperationMetrics& OperationMetrics::process() {
  static auto* metrics = [] {
    auto* m = new OperationMetrics(SegmentWriter::process());
    m->process_ = true;
    // Registration and declarations are consistent across a fork: the
    // forking thread holds both locks (this one first, as register_cell
    // takes them), and the child starts afresh.
    static OperationMetrics* self = m;
    pthread_atfork(
        [] {
          self->mu_.lock();
          detail::identity_prepare_fork();
        },
        [] {
          detail::identity_after_fork(false);
          self->mu_.unlock();
        },
        [] {
          detail::identity_after_fork(true);
          self->forget_cells_after_fork();
          self->mu_.unlock();
        });
    return m;
  }();
  return *metrics;
}

void OperationMetrics::forget_cells_after_fork() noexcept {
  for (Slot& s : cells_) s.cell.store(nullptr, std::memory_order_relaxed);
}

const OperationMetrics::Cell& OperationMetrics::register_cell(Slot& s, Operation op, Executor ex) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const Cell* c = s.cell.load(std::memory_order_relaxed)) return *c;
  const std::optional<ServerIdentity> server =
      process_ ? detail::identity_for_series() : declared_server();
  Cell& c = *owned_.emplace_back(std::make_unique<Cell>());
  c.writer = &writer_;
  c.values = {std::string(to_string(op)), std::string(to_string(ex))};
  if (server) c.values.push_back(server->name);
  c.labels = {{label::kOperation, c.values[0]}, {label::kExecutor, c.values[1]}};
  if (server) c.labels.push_back({label::kServerName, c.values[2]});
  const std::span<const Label> labels = c.labels;
  c.queued = writer_.gauge(family::kOperationQueued, labels);
  c.active = writer_.gauge(family::kOperationActive, labels);
  c.queued_ages = writer_.ages(family::kOperationOldestQueued, labels);
  c.active_ages = writer_.ages(family::kOperationOldestActive, labels);
  c.labels.push_back({label::kOutcome, {}});  // its value: the outcome's, when it registers
  s.cell.store(&c, std::memory_order_release);
  return c;
}

Histogram detail::OperationCell::make_queue_duration(WaitOutcome how) const {
  std::vector<Label> l(labels.begin(), labels.end() - 1);  // not the outcome
  l.push_back({label::kWaitOutcome, kWaitOutcomes[static_cast<size_t>(how)]});
  return writer->histogram(family::kOperationQueueDuration, l, kOperationBoundsNs,
                           double(kNanosPerSecond), /*native=*/true);
}

const Histogram& detail::OperationCell::duration(Outcome outcome) const {
  const auto i = static_cast<size_t>(outcome);
  return durations[i].get([&] {
    std::vector<Label> l = labels;
    l.back().value = kOutcomes[i];
    return writer->histogram(family::kOperationDuration, l, kOperationBoundsNs,
                             double(kNanosPerSecond), /*native=*/true);
  });
}

}  // namespace gym
