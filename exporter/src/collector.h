// The Collector interface: every source of metric families the exporter
// serves is one collector, in one file of collectors/, that registers its
// kind (name, configuration section, factory) with GYM_REGISTER_COLLECTOR.
// The exporter builds one collector of every registered kind and treats them
// all alike: start() before serving, collect() on each scrape, stop() before
// dropping. Adding a collector is its file, its configuration section, its
// rows in the contract table (contract/table.h) and its tests; one that
// samples on an interval derives from SampledCollector (sampled_collector.h).
//
// Thread-safety: collect() is called under the Exposition's lock, one scrape
// at a time, and may overlap an IntervalCollector's sampling thread.
#pragma once

#include <prometheus/metric_family.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "contract/families.h"
#include "shared_registry.h"

namespace gym::exporter {

class YamlReader;
struct Config;
class ServerWatcher;
class ServerBoard;
class DeathLog;
class VerdictBoard;

// What a family's samples carry that prometheus-cpp's types have no field
// for, by the index of the sample in the family.
struct FamilyExtras {
  // Native histograms (gym/native_histogram.h): the counts of the zero bucket,
  // then one per key, not cumulative; empty for a sample without them. Views
  // of counts that live at least until the family is emitted.
  std::vector<std::span<const uint64_t>> native;
  // Counters and histograms: since when the sample counts (Unix seconds), 0
  // when not known; empty when no sample has one.
  std::vector<double> created;
  // Histograms: each sample's exemplars (gym/registry_reader.h), one per
  // classic bucket, empty for a sample without; their raw values divided by
  // exemplar_divisor are in the family's unit. Views, as `native`.
  std::vector<std::span<const Exemplar>> exemplars;
  double exemplar_divisor = 1;
};

// Receives one family at a time, with its extras when it has any; neither
// need outlive the call. Made from a callable of the family alone (what most
// callers want: the extras are dropped) or of both.
class Emit {
 public:
  using Full = std::function<void(const Family&, const FamilyExtras*)>;
  template <class F>
  requires std::invocable<F&, const Family&> Emit(
      F f)  // NOLINT(google-explicit-constructor): a callable is an Emit
      : fn_([f = std::move(f)](const Family& m, const FamilyExtras*) mutable { f(m); }) {}
  static Emit full(Full fn) { return Emit(std::move(fn), 0); }
  void operator()(const Family& f, const FamilyExtras* extras = nullptr) const { fn_(f, extras); }

 private:
  Emit(Full fn, int) : fn_(std::move(fn)) {}
  Full fn_;
};
using Log = std::function<void(const std::string&)>;

// What a sampling collector says of its samples, served for every collector
// as gym_exporter_collector_sample_{duration_seconds,overruns_total,
// errors_total}{collector}.
struct SampleStats {
  std::string collector;
  double last_duration_seconds = 0;
  uint64_t overruns = 0;
  std::map<std::string, uint64_t> errors;  // by reason, every reason it has
  double since = 0;                        // Unix seconds its counts count from
};

class Collector {
 public:
  virtual ~Collector() = default;
  // Before the first scrape that should see its work; idempotent.
  virtual void start() {}
  // Before it is dropped, while scrapes are still served: its last work
  // (a final sample) is what the next scrapes see. Idempotent.
  virtual void stop() {}
  // One round of its work now, on the caller's thread, for a collector that
  // is not started (--once). Nothing for collectors that work at collect().
  virtual void refresh() {}
  virtual void collect(const Emit& emit) = 0;
  // A sampling collector's account of its samples (sampled_collector.h);
  // nullopt for the others.
  virtual std::optional<SampleStats> sample_stats() const { return std::nullopt; }
  // How often a sampling collector samples; zero for one that works at
  // collect() (a caller without a sampling thread refreshes it every time).
  virtual std::chrono::duration<double> interval() const { return {}; }
};

// The sampling collectors' accounts (SampleStats) as the families
// gym_exporter_collector_sample_*, by collector.
void emit_sample_stats(const std::vector<SampleStats>& stats, const Emit& emit);

// Unix seconds now, and when this exporter process started (taken before
// main): the start of the counters that count from then.
double unix_now_seconds();
double exporter_start_unix_seconds();
// Emits `f` with every sample created at `since` (Unix seconds) when it is a
// counter or histogram and `since` is known (> 0); as it is otherwise.
void emit_since(const Emit& emit, const Family& f, double since);

// What a collector's configuration section reads into (a subclass of its own).
class CollectorSettings {
 public:
  virtual ~CollectorSettings() = default;
  // `enabled: false` in its section: the collector is not built, and its
  // families are not served.
  bool enabled = true;
};

// What every collector may use.
struct CollectorContext {
  std::shared_ptr<SharedRegistry> registry;  // the one reader of the registry
  Log warn = [](const std::string&) {};      // a problem worth a warning
  // Which processes are which server (servers/watcher.h), shared by every
  // per-server collector.
  std::shared_ptr<ServerWatcher> servers = nullptr;
  // Where per-server collectors post their samples' figures for the views
  // that show servers (servers/board.h); may be null.
  std::shared_ptr<ServerBoard> board = nullptr;
  // Where process deaths are recorded (servers/deaths.h), kept across
  // reloads; null: the deaths collector keeps its own.
  std::shared_ptr<DeathLog> deaths = nullptr;
  // Where the verdict collector posts its verdicts (collectors/verdict.h);
  // null: no verdict collector is made.
  std::shared_ptr<VerdictBoard> verdicts = nullptr;
};

struct CollectorKind {
  std::string name;  // also its configuration section, when it has one
  int order = 0;     // its place in the exposition (lowest first), then by name
  // Reads its section (a null node when the file has none) into its
  // settings; errors through the reader. Null: the collector has no section.
  std::function<std::shared_ptr<const CollectorSettings>(YamlReader&, const YAML::Node&)> parse;
  // The collector, for settings from parse (nullptr when it has no section).
  std::function<std::unique_ptr<Collector>(const CollectorSettings*, const CollectorContext&)> make;
};

// The kind of a collector C with no section, made with no arguments.
template <class C>
CollectorKind plain_kind(std::string name, int order) {
  return {std::move(name), order, nullptr,
          [](const CollectorSettings*, const CollectorContext&) { return std::make_unique<C>(); }};
}

// Adds a kind; called at static initialization through GYM_REGISTER_COLLECTOR.
bool register_collector_kind(CollectorKind kind);
// Every registered kind, in exposition order.
std::vector<const CollectorKind*> collector_kinds();
const CollectorKind* find_collector_kind(const std::string& name);
// A collector of the named kind, with `settings` or (nullptr) the defaults of
// its section; nullptr for an unknown name.
std::unique_ptr<Collector> make_collector(const std::string& name, const CollectorContext& context,
                                          const CollectorSettings* settings = nullptr);

#define GYM_REGISTER_COLLECTOR_CAT2(a, b) a##b
#define GYM_REGISTER_COLLECTOR_CAT(a, b) GYM_REGISTER_COLLECTOR_CAT2(a, b)
#define GYM_REGISTER_COLLECTOR(...)                              \
  [[maybe_unused]] static const bool GYM_REGISTER_COLLECTOR_CAT( \
      gym_collector_registered_, __LINE__) = ::gym::exporter::register_collector_kind(__VA_ARGS__)

}  // namespace gym::exporter
