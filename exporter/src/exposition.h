// The exposition: independent collectors behind one small interface, each
// adding metric families (prometheus-cpp's model) on every scrape;
// Exposition renders them with our text writer (text_format.h), whose output
// is checked against prometheus-cpp's TextSerializer in the tests.
//
// Thread-safety: Exposition::render may be called from any number of
// threads; collectors are called under its lock, one scrape at a time.
#pragma once

#include <prometheus/metric_family.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gym/registry_reader.h"

namespace gym::exporter {

using Families = std::vector<prometheus::MetricFamily>;
// Receives one family at a time; the family need not outlive the call.
using Emit = std::function<void(const prometheus::MetricFamily&)>;

class Collector {
 public:
  virtual ~Collector() = default;
  virtual void collect(const Emit& emit) = 0;
};

// The one registry reader of the exporter, shared by the collectors that
// need it (the registry collector, and the memory sampler for declared
// servers): a reader must be the only one of its directory.
class SharedRegistry {
 public:
  explicit SharedRegistry(std::string dir, ReaderOptions options = {})
      : reader_(std::move(dir), std::move(options)) {}
  // Runs f(reader) under the lock.
  template <class F>
  auto with(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    return f(reader_);
  }

 private:
  std::mutex mu_;
  RegistryReader reader_;
};

// The contract's concurrency and resources-operation families, built from a
// fresh registry snapshot, and the registry's own counts.
class RegistryCollector : public Collector {
 public:
  // `log` receives each problem the reader reports (once per file or record).
  RegistryCollector(std::shared_ptr<SharedRegistry> registry,
                    std::function<void(const std::string&)> log);
  void collect(const Emit& emit) override;

 private:
  void rebuild();
  void update_values(const Snapshot& snap);
  void collect_locked(const Snapshot& snap, const Emit& emit);

  std::shared_ptr<SharedRegistry> registry_;
  std::function<void(const std::string&)> log_;
  std::string last_dir_error_;
  // The model of the served series, kept across scrapes: rebuilt when the
  // set of series changes, otherwise only its values are updated.
  std::vector<const SeriesInfo*> served_;  // in snapshot order
  uint64_t served_epoch_ = UINT64_MAX;     // the snapshot epoch served_ is from
  std::vector<size_t> served_index_;       // index in snapshot.series
  Families model_;
  std::vector<std::pair<prometheus::ClientMetric*, size_t>> slots_;  // metric, served index
  // gym_concurrency_active = limit - available: (metric, limit, available)
  // with indexes into served_ (-1: none).
  struct ActiveSlot {
    prometheus::ClientMetric* metric;
    long limit;
    long available;
  };
  prometheus::MetricFamily active_;
  std::vector<ActiveSlot> active_slots_;
  std::vector<size_t> scratch_index_;
  std::vector<const SeriesInfo*> scratch_infos_;
};

// The standard process_* metrics of the exporter itself, from /proc/self.
class ProcessCollector : public Collector {
 public:
  explicit ProcessCollector(std::string proc_root = "/proc") : proc_(std::move(proc_root)) {}
  void collect(const Emit& emit) override;

 private:
  std::string proc_;
};

// gym_exporter_build_info.
class BuildInfoCollector : public Collector {
 public:
  void collect(const Emit& emit) override;
};

class Exposition {
 public:
  explicit Exposition(std::vector<std::unique_ptr<Collector>> collectors)
      : collectors_(std::move(collectors)) {}
  // One exposition in the text format, built now.
  std::string render();
  // Swaps the collectors (a reload that changes the registry directory).
  void replace(std::vector<std::unique_ptr<Collector>> collectors);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Collector>> collectors_;
  size_t last_size_ = 0;  // to size the next exposition's buffer
};

// The HELP text and type of every family the exporter serves, from the
// contract; nullptr for a family it does not know.
struct FamilyDoc {
  const char* name;
  prometheus::MetricType type;
  const char* help;
};
const FamilyDoc* family_doc(std::string_view name);

// Helpers for collectors: a family with the contract's HELP and type appended
// to `out`; a sample with labels appended to a family; a one-sample counter
// or gauge family appended to `out`.
prometheus::MetricFamily& add_family(Families& out, std::string_view name);
prometheus::ClientMetric& add_metric(
    prometheus::MetricFamily& f, const std::vector<std::pair<std::string, std::string>>& labels);
void add_simple(Families& out, std::string_view name, double value,
                const std::vector<std::pair<std::string, std::string>>& labels = {});

extern const char* const kVersion;
extern const char* const kRevision;

}  // namespace gym::exporter
