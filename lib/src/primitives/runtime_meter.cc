#include "gym/runtime_meter.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "gym/server_identity.h"

namespace gym {

namespace {
std::string server_of(std::optional<std::string_view> given) {
  if (given) {
    if (!valid_server_name(*given))
      throw std::invalid_argument("server name '" + std::string(*given) +
                                  "' must be 1 to 128 bytes");
    return std::string(*given);
  }
  std::optional<ServerIdentity> declared = declared_server();
  return declared ? declared->name : std::string();
}

std::vector<Label> server_labels(const std::string& server) {
  if (server.empty()) return {};
  return {{label::kServerName, server}};
}
}  // namespace

LoopMeter::LoopMeter(std::optional<std::string_view> server_name, SegmentWriter& writer)
    : server_(server_of(server_name)) {
  const std::vector<Label> l = server_labels(server_);
  lag_ = writer.histogram(family::kEventLoopLag, l, kOperationBoundsNs, double(kNanosPerSecond),
                          /*native=*/true);
  heartbeat_ = writer.ages(family::kEventLoopBlocked, l);
  tasks_ = writer.gauge(family::kEventLoopTasks, l);
}

void LoopMeter::beat(int64_t lag_ns, int64_t due_in_ns) noexcept {
  lag_.observe(std::max<int64_t>(lag_ns, 0));
  const int64_t due = segment::precise_now_ns() + std::max<int64_t>(due_in_ns, 0);
  std::lock_guard<std::mutex> lock(mu_);
  ticket_ = ticket_ == 0 ? heartbeat_.begin(due) : heartbeat_.restart(ticket_, due);
}

RuntimeMeter::RuntimeMeter(std::optional<std::string_view> server_name, SegmentWriter& writer)
    : server_(server_of(server_name)), writer_(writer) {
  threads_ = writer.gauge(family::kPythonThreads, server_labels(server_));
}

const Histogram& RuntimeMeter::pauses(size_t generation) const {
  return pauses_[generation].get([&] {
    std::vector<Label> l = server_labels(server_);
    l.push_back({label::kGcGeneration, kGcGenerations[generation]});
    collections_[generation] = writer_.counter(family::kGcCollections, l);
    // Classic buckets only: three per process, and a pause's spread is
    // known (microseconds to seconds).
    return writer_.histogram(family::kGcPause, l, kGcPauseBoundsNs, double(kNanosPerSecond));
  });
}

bool RuntimeMeter::collected(int generation, int64_t pause_ns) const {
  if (generation < 0 || size_t(generation) >= kGcGenerations.size()) return false;
  pauses(size_t(generation)).observe(std::max<int64_t>(pause_ns, 0));
  collections_[generation].add();
  return true;
}

}  // namespace gym
