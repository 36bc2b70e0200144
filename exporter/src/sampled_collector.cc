#include "sampled_collector.h"

#include "contract/families.h"

namespace gym::exporter {

IntervalCollector::~IntervalCollector() {
  // The subclass has stopped it; a thread still here would call a sample()
  // that is gone.
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_) std::terminate();
}

IntervalCollector::IntervalCollector(std::chrono::duration<double> interval, std::string name,
                                     Log log)
    : name_(std::move(name)),
      log_(std::move(log)),
      since_(unix_now_seconds()),
      interval_(interval) {}

void IntervalCollector::start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return;
    started_ = true;
  }
  run();
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || !samples_on_interval()) return;
  thread_ = SampleThread::of(sampling_group());
  thread_->add(
      this, std::chrono::duration_cast<SampleThread::Clock::duration>(interval_), [this] { run(); },
      [this](uint64_t missed) { overruns_.fetch_add(missed, std::memory_order_relaxed); });
}

void IntervalCollector::stop() {
  std::shared_ptr<SampleThread> thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
    thread.swap(thread_);
  }
  if (thread) thread->remove(this);  // after its sample, if one runs now
  run();                             // the final sample
}

void IntervalCollector::run() {
  const auto started = std::chrono::steady_clock::now();
  sample();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
  std::lock_guard<std::mutex> lock(stats_mu_);
  last_duration_ = took.count();
  failing_.swap(failing_now_);
  failing_now_.clear();
}

void IntervalCollector::error_reasons(std::initializer_list<const char*> reasons) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  for (const char* r : reasons) errors_.try_emplace(r, 0);
}

void IntervalCollector::count_error(const std::string& reason, const std::string& detail) {
  bool say = false;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++errors_[reason];
    say = failing_now_.insert(detail).second && !failing_.contains(detail);
  }
  if (say && log_) log_(name_ + " sample: " + detail);
}

std::map<std::string, uint64_t> IntervalCollector::error_counts() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return errors_;
}

double IntervalCollector::last_duration() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return last_duration_;
}

std::optional<SampleStats> IntervalCollector::sample_stats() const {
  if (name_.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(stats_mu_);
  return SampleStats{name_, last_duration_, overruns(), errors_, since_};
}

}  // namespace gym::exporter
