#include "exposition/exposition.h"

#include <chrono>
#include <new>

#include "collector.h"
#include "contract/families.h"
#include "contract/table.h"
#include "exposition/text.h"

namespace gym::exporter {

namespace {
constexpr size_t kFirstReserve = size_t{64} << 20;
}  // namespace

Exposition::Exposition(std::vector<std::unique_ptr<Collector>> collectors, Log log)
    : collectors_(std::move(collectors)), log_(std::move(log)) {}

Exposition::~Exposition() {
  stop();
}

void Exposition::start() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : collectors_) c->start();
}

void Exposition::stop() {
  // Not under the lock: scrapes go on while collectors take their final
  // samples. The list itself changes only in replace(), on the same thread.
  std::vector<Collector*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : collectors_) all.push_back(c.get());
  }
  for (Collector* c : all) c->stop();
}

void Exposition::refresh() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : collectors_) c->refresh();
}

std::string Exposition::render() {
  return render(TextEncoder());
}

namespace {
// The family with its OpenTelemetry name and its labels', escaped by
// `scheme` (the names Prometheus gets back when it unescapes them).
void to_otel_names(Family& f, Escaping scheme) {
  if (f.spec != nullptr && !f.spec->otel.empty()) f.name = std::string(f.spec->otel);
  f.name = escape_name(f.name, scheme);
  for (auto& m : f.metric)
    for (auto& l : m.label) l.name = escape_name(otel_label_name(l.name), scheme);
}

// Whether `f` is asked for: by its name, or a histogram by a sample's name.
bool asked_for(const prometheus::MetricFamily& f, const std::set<std::string>& names) {
  if (names.empty() || names.contains(f.name)) return true;
  if (f.type != prometheus::MetricType::Histogram) return false;
  for (const char* suffix : {"_bucket", "_sum", "_count"})
    if (names.contains(f.name + suffix)) return true;
  return false;
}

// The names asked for, with the Prometheus name of each OpenTelemetry one (a
// family's, or a histogram sample's: its family's and suffix), so that the
// names a reply carries select it under either scheme.
std::set<std::string> with_prometheus_names(const std::set<std::string>& names) {
  std::set<std::string> out = names;
  for (const std::string& n : names) {
    out.emplace(prometheus_family_name(n));
    for (std::string_view suffix : {"_bucket", "_sum", "_count", "_total", "_created"}) {
      if (!std::string_view(n).ends_with(suffix)) continue;
      const std::string_view base = std::string_view(n).substr(0, n.size() - suffix.size());
      const std::string_view family = prometheus_family_name(base);
      if (family != base) out.emplace(std::string(family) + std::string(suffix));
    }
  }
  return out;
}
}  // namespace

std::string Exposition::render(const Encoder& encoder, const std::set<std::string>& asked) {
  std::string out;
  render_into(encoder, asked, &out, nullptr);
  return out;
}

size_t Exposition::render(const Encoder& encoder, const std::set<std::string>& asked,
                          const Pieces& to) {
  return render_into(encoder, asked, nullptr, &to);
}

namespace {
// Room for a whole exposition at once: a buffer that grows by doubling
// holds its old and new copies at each step (13 MB of 20,000 series took
// 23 MB at the first scrape). Without a last size, address space that only
// becomes memory where it is written. Without address space to spare (a
// tight RLIMIT_AS), it grows instead.
void reserve(std::string& out, size_t bytes) {
  try {
    out.reserve(bytes);
  } catch (const std::bad_alloc&) {
  }
}
}  // namespace

// The exposition's own families, last: the violations so far and how long
// the scrape took until then.
void Exposition::add_own_families(const Encoder& encoder, const std::set<std::string>& names,
                                  std::chrono::duration<double> took, std::string& out) {
  Families own;
  add_simple(own, "gym_exporter_contract_violations_total", double(violations_));
  add_simple(own, "gym_exporter_scrape_duration_seconds", took.count());
  FamilyExtras since_start;  // the exporter's own counter counts from its start
  since_start.created.assign(1, exporter_start_unix_seconds());
  for (auto& f : own) {
    if (!asked_for(f, names)) continue;
    if (encoder.escaping() != Escaping::kUnderscores) to_otel_names(f, encoder.escaping());
    encoder.family(f, f.type == prometheus::MetricType::Counter ? &since_start : nullptr, out);
  }
}

size_t Exposition::render_into(const Encoder& encoder, const std::set<std::string>& asked,
                               std::string* whole, const Pieces* to) {
  const std::set<std::string> names = with_prometheus_names(asked);
  std::lock_guard<std::mutex> lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  std::string& out = whole != nullptr ? *whole : pieces_;
  out.clear();
  reserve(out, to != nullptr     ? 2 * kPiece
               : last_size_ != 0 ? last_size_ + last_size_ / 8
                                 : kFirstReserve);
  size_t handed = 0;  // bytes handed to `to`
  const auto hand_on = [&](size_t at_least) {
    if (to == nullptr || out.size() < at_least) return;
    handed += out.size();
    (*to)(out);
    out.clear();
  };
  Family renamed;
  const Emit emit = Emit::full([&](const Family& f, const FamilyExtras* extras) {
    // A family with no row is a programming error, and a family with rows
    // is the common case: check the row first, the samples' labels always.
    if (std::string why = contract_violation(f); !why.empty()) {
      ++violations_;
      if (reported_.insert(f.name).second && log_) log_(why + ": not served");
      return;
    }
    if (!asked_for(f, names)) return;
    const Family* g = &f;
    if (encoder.escaping() != Escaping::kUnderscores) {
      renamed = f;
      to_otel_names(renamed, encoder.escaping());
      g = &renamed;
    }
    if (to == nullptr || !encoder.splits() || g->metric.size() <= kPartSeries) {
      encoder.family(*g, extras, out);
      return hand_on(kPiece);
    }
    for (size_t from = 0; from < g->metric.size(); from += kPartSeries) {
      encoder.family_part(*g, extras, from, from + kPartSeries, out);
      hand_on(kPiece);
    }
  });
  std::vector<SampleStats> stats;
  for (auto& c : collectors_) {
    c->collect(emit);
    if (std::optional<SampleStats> s = c->sample_stats()) stats.push_back(std::move(*s));
  }
  emit_sample_stats(stats, emit);
  add_own_families(encoder, names, std::chrono::steady_clock::now() - start, out);
  encoder.finish(out);
  last_size_ = handed + out.size();
  hand_on(0);
  if (pieces_.capacity() > kKeptBuffer) std::string().swap(pieces_);
  return last_size_;
}

void Exposition::replace(std::vector<std::unique_ptr<Collector>> collectors) {
  // Scrapes wait: the old collectors (and a registry reader only they hold)
  // are gone before the new ones start, so that a new reader of the same
  // directory finds its lock free.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : collectors_) c->stop();
  collectors_.clear();
  collectors_ = std::move(collectors);
  for (auto& c : collectors_) c->start();
}

size_t Exposition::violations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return violations_;
}

}  // namespace gym::exporter
