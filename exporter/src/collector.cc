#include "collector.h"

#include <time.h>

#include <algorithm>
#include <tuple>

#include "yaml_reader.h"

namespace gym::exporter {

namespace {
std::vector<CollectorKind>& kinds() {
  static std::vector<CollectorKind> all;  // filled at static initialization
  return all;
}
}  // namespace

bool register_collector_kind(CollectorKind kind) {
  kinds().push_back(std::move(kind));
  return true;
}

std::vector<const CollectorKind*> collector_kinds() {
  std::vector<const CollectorKind*> out;
  for (const CollectorKind& k : kinds()) out.push_back(&k);
  std::sort(out.begin(), out.end(), [](const CollectorKind* a, const CollectorKind* b) {
    return std::tie(a->order, a->name) < std::tie(b->order, b->name);
  });
  return out;
}

const CollectorKind* find_collector_kind(const std::string& name) {
  for (const CollectorKind& k : kinds())
    if (k.name == name) return &k;
  return nullptr;
}

std::unique_ptr<Collector> make_collector(const std::string& name, const CollectorContext& context,
                                          const CollectorSettings* settings) {
  const CollectorKind* kind = find_collector_kind(name);
  if (kind == nullptr) return nullptr;
  std::shared_ptr<const CollectorSettings> defaults;
  if (settings == nullptr && kind->parse) {
    std::vector<std::string> errors;
    YamlReader rd("defaults", errors);
    defaults = kind->parse(rd, YAML::Node());
    settings = defaults.get();
  }
  return kind->make(settings, context);
}

IntervalCollector::~IntervalCollector() {
  // The subclass has stopped it; a thread still here would call a sample()
  // that is gone.
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) std::terminate();
}

void IntervalCollector::start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return;
    started_ = true;
  }
  sample();
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || !samples_on_interval()) return;
  thread_ = std::thread([this] {
    using Clock = std::chrono::steady_clock;
    const auto period = std::chrono::duration_cast<Clock::duration>(interval_);
    auto next = Clock::now() + period;
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_until(lock, next, [this] { return stopping_; })) {
      lock.unlock();
      sample();
      lock.lock();
      next += period;
      const auto now = Clock::now();
      if (now >= next) {  // this sample ran into the next period(s)
        const auto missed = (now - next) / period + 1;
        overruns_.fetch_add(uint64_t(missed), std::memory_order_relaxed);
        next = now + period;
      }
    }
  });
}

void IntervalCollector::stop() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
    thread.swap(thread_);
  }
  cv_.notify_all();
  if (thread.joinable()) thread.join();
  sample();  // the final sample
}

double unix_now_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

namespace {
const double g_exporter_started = unix_now_seconds();
}  // namespace

double exporter_start_unix_seconds() {
  return g_exporter_started;
}

void emit_since(const Emit& emit, const Family& f, double since) {
  if (!(since > 0) ||
      (f.type != prometheus::MetricType::Counter && f.type != prometheus::MetricType::Histogram))
    return emit(f);
  FamilyExtras extras;
  extras.created.assign(f.metric.size(), since);
  emit(f, &extras);
}

}  // namespace gym::exporter
