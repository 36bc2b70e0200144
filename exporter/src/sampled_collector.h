// The shell every sampling collector shares: a thread that samples on an
// interval, the account of its samples (how long the last took, the periods
// it overran, its failed reads by reason, each logged once while it
// repeats), and the last sample published under one lock. A collector that
// samples says what a sample is (take) and what it serves of one (serve),
// and reads its section from a table (SettingsTable).
//
// Thread-safety: take() runs on the sampling thread (or the caller's, for
// refresh()); serve() on a scrape's, with a published sample that no sample
// changes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "collector.h"
#include "sample_thread.h"
#include "servers/board.h"
#include "yaml_reader.h"

namespace gym::exporter {

// A collector that samples on an interval: one sample at start(), one every
// interval on its sampling thread (sample_thread.h: its own, or its group's),
// and a final one at stop(). The interval is a period (a sample starts every
// interval, whatever a sample takes); a sample that runs past the start of
// the next one makes the missed starts overruns, and the next sample starts
// an interval after it ends. A subclass's destructor must call stop()
// (sample() is its own).
class IntervalCollector : public Collector {
 public:
  // `name` (its kind's) labels its sample account; empty: none is served.
  explicit IntervalCollector(std::chrono::duration<double> interval, std::string name = {},
                             Log log = {});
  ~IntervalCollector() override;
  void start() final;
  void stop() final;
  void refresh() final { run(); }
  // One sample: what start(), the thread and stop() call (timed by them).
  virtual void sample() = 0;
  // Whether samples between start and stop can change anything; false (a
  // source that is not there, say): start() samples once and makes no thread.
  virtual bool samples_on_interval() const { return true; }
  // The sampling thread it shares with the collectors that name the same
  // group (SampleThread::of); empty: one of its own.
  virtual std::string sampling_group() const { return {}; }
  // Periods in which no sample started because one was still running.
  uint64_t overruns() const { return overruns_.load(std::memory_order_relaxed); }
  std::chrono::duration<double> interval() const override { return interval_; }
  std::optional<SampleStats> sample_stats() const override;
  const std::string& name() const { return name_; }

 protected:
  // Reasons its errors may have, each served from 0.
  void error_reasons(std::initializer_list<const char*> reasons);
  // A failed read of the sample in progress: counted every time; `detail`
  // logged once while it repeats sample after sample.
  void count_error(const std::string& reason, const std::string& detail);
  // Unix seconds its own counts count from.
  double since() const { return since_; }
  // Its failed reads so far, by reason; how long its last sample took.
  std::map<std::string, uint64_t> error_counts() const;
  double last_duration() const;
  const Log& log() const { return log_; }

 private:
  void run();  // sample(), timed

  const std::string name_;
  const Log log_;
  const double since_;
  std::atomic<uint64_t> overruns_{0};
  std::chrono::duration<double> interval_;
  std::mutex mu_;
  bool started_ = false;
  bool stopping_ = false;
  std::shared_ptr<SampleThread> thread_;  // while it samples on an interval
  mutable std::mutex stats_mu_;           // guards the account
  double last_duration_ = 0;
  std::map<std::string, uint64_t> errors_;
  std::set<std::string> failing_, failing_now_;  // details logged, to log each once
};

// The sampling thread of the per-server collectors (servers, memory, cpu,
// cgroup): one for all of them.
inline constexpr const char* kPerServerGroup = "per-server";

// A collector whose samples are values: take() makes one on the sampling
// thread, it is published whole, and every scrape serves the last one.
// figures() says what the sample holds of each server for the board; the
// figures are posted under the lock that publishes the sample, so the board
// and the next scrape read one sample.
template <class Sample>
class SampledCollector : public IntervalCollector {
 public:
  SampledCollector(std::chrono::duration<double> interval, std::string name, Log log,
                   std::shared_ptr<ServerBoard> board = nullptr)
      : IntervalCollector(interval, std::move(name), std::move(log)), board_(std::move(board)) {}
  void sample() final {
    auto s = std::make_shared<const Sample>(take());
    std::shared_ptr<const ServerFigures> f = board_ ? figures(*s) : nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    if (f) board_->post(name(), std::move(f));
    last_ = std::move(s);
  }
  void collect(const Emit& emit) final {
    if (std::shared_ptr<const Sample> s = last()) serve(*s, emit);
  }
  // The last published sample (null before the first).
  std::shared_ptr<const Sample> last() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }
  // A copy of it, or an empty sample before the first (for tests).
  Sample latest() const {
    std::shared_ptr<const Sample> s = last();
    return s ? *s : Sample{};
  }

 protected:
  virtual Sample take() = 0;
  virtual void serve(const Sample& s, const Emit& emit) const = 0;
  virtual std::shared_ptr<const ServerFigures> figures(const Sample&) const { return nullptr; }

 private:
  std::shared_ptr<ServerBoard> board_;
  mutable std::mutex mu_;
  std::shared_ptr<const Sample> last_;
};

// A sampling collector's section: `enabled`, `interval_seconds` and what its
// table adds.
struct SampledSettings : CollectorSettings {
  double interval_seconds = 5;
};

// A section's keys as a table: each key, the member it is read into, and a
// number's minimum.
template <class S>
struct Setting {
  std::string key;
  std::variant<bool S::*, double S::*, std::string S::*> field;
  double min = 0;
};

// Reads section `name` of `n` into a new S (a SampledSettings) by the table,
// after enabled and interval_seconds; errors through the reader.
template <class S>
std::shared_ptr<const CollectorSettings> read_settings(YamlReader& rd, const YAML::Node& n,
                                                       const std::string& name,
                                                       std::vector<Setting<S>> table = {}) {
  auto s = std::make_shared<S>();
  table.insert(table.begin(),
               {{"enabled", &S::enabled}, {"interval_seconds", &S::interval_seconds, 0.01}});
  YamlReader::Keys keys;
  for (const Setting<S>& row : table)
    keys[row.key] = [&rd, &s, row, name](const YAML::Node& v) {
      const std::string key = name + "." + row.key;
      if (auto* b = std::get_if<bool S::*>(&row.field)) rd.boolean(v, key, (*s).*(*b));
      if (auto* d = std::get_if<double S::*>(&row.field)) rd.number(v, key, (*s).*(*d), row.min);
      if (auto* t = std::get_if<std::string S::*>(&row.field)) rd.string(v, key, (*s).*(*t));
    };
  rd.mapping(n, name, keys);
  return s;
}

// The kind of a sampling collector whose section is an S (a SampledSettings)
// read by `table`; `make` builds it from its settings and the context.
template <class S>
CollectorKind sampled_kind(
    std::string name, int order, std::vector<Setting<S>> table,
    std::function<std::unique_ptr<Collector>(const S&, const CollectorContext&)> make) {
  return {name, order,
          [name, table](YamlReader& rd, const YAML::Node& n) {
            return read_settings<S>(rd, n, name, table);
          },
          [make](const CollectorSettings* s, const CollectorContext& c) {
            return make(static_cast<const S&>(*s), c);
          }};
}

// The kind of a per-server collector C with no keys but enabled and
// interval_seconds, made as C(servers, log, interval_seconds).
template <class C>
CollectorKind per_server_kind(std::string name, int order) {
  return sampled_kind<SampledSettings>(
      std::move(name), order, {}, [](const SampledSettings& s, const CollectorContext& c) {
        return std::make_unique<C>(c.servers, c.warn, s.interval_seconds);
      });
}

}  // namespace gym::exporter
