#include "gym/resources_operation.h"

#include <string>
#include <vector>

#include "gym/server_identity.h"

namespace gym {

OperationMetrics& OperationMetrics::process() {
  static auto* metrics = new OperationMetrics(SegmentWriter::process());
  return *metrics;
}

void OperationMetrics::register_cell(Slot& s, Operation op, Executor ex) {
  std::lock_guard<std::mutex> lock(mu_);
  if (s.ready.load(std::memory_order_relaxed)) return;
  const std::optional<ServerIdentity> server = declared_server();
  std::vector<Label> labels = {{label::kOperation, to_string(op)},
                               {label::kExecutor, to_string(ex)}};
  if (server) labels.push_back({label::kServerName, server->name});
  Cell& c = s.cell;
  c.queue_duration = writer_.histogram(family::kOperationQueueDuration, labels, kOperationBoundsNs,
                                       double(kNanosPerSecond));
  c.queued = writer_.gauge(family::kOperationQueued, labels);
  c.active = writer_.gauge(family::kOperationActive, labels);
  c.queued_ages = writer_.ages(family::kOperationOldestQueued, labels);
  c.active_ages = writer_.ages(family::kOperationOldestActive, labels);
  labels.push_back({label::kOutcome, {}});
  for (size_t i = 0; i < kOutcomes.size(); ++i) {
    labels.back().value = kOutcomes[i];
    c.duration[i] = writer_.histogram(family::kOperationDuration, labels, kOperationBoundsNs,
                                      double(kNanosPerSecond));
  }
  s.ready.store(true, std::memory_order_release);
}

}  // namespace gym
