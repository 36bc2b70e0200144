#include "snapshot/view.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "gym/contract.h"
#include "host/procfs.h"

namespace gym::exporter {

namespace {

std::string label_of(const SeriesInfo& info, std::string_view name) {
  for (const auto& [k, v] : info.labels)
    if (k == name) return std::string(v);
  return {};
}

// Into h, reusing its buckets' storage.
void assign_histogram(HistogramView& h, const SeriesSample& s) {
  h.count = s.count();
  h.sum = double(s.sum) / s.info->unit_divisor;
  h.buckets.resize(s.cumulative_buckets.size());
  for (size_t b = 0; b < s.cumulative_buckets.size(); ++b)
    h.buckets[b] = {
        b < s.info->bounds.size() ? double(s.info->bounds[b]) / s.info->unit_divisor : INFINITY,
        s.cumulative_buckets[b]};
}

// Adds s into h (histograms of the same bounds: an operation's queue
// durations by how the wait ended); h empty takes s as it is.
void add_histogram(HistogramView& h, const SeriesSample& s) {
  if (h.buckets.empty()) return assign_histogram(h, s);
  if (h.buckets.size() != s.cumulative_buckets.size()) return;  // not the same bounds
  h.count += s.count();
  h.sum += double(s.sum) / s.info->unit_divisor;
  for (size_t b = 0; b < h.buckets.size(); ++b) h.buckets[b].second += s.cumulative_buckets[b];
}

}  // namespace

std::optional<double> HistogramView::quantile(double q) const {
  if (count == 0 || buckets.empty()) return std::nullopt;
  const double rank = q * double(count);
  double lower = 0;
  uint64_t below = 0;
  for (const auto& [le, cumulative] : buckets) {
    if (double(cumulative) >= rank && cumulative > below) {
      if (std::isinf(le)) return lower;  // the highest finite bound, as PromQL
      return lower + (le - lower) * (rank - double(below)) / double(cumulative - below);
    }
    lower = std::isinf(le) ? lower : le;
    below = cumulative;
  }
  return lower;
}

HistogramView HistogramView::minus(const HistogramView& earlier) const {
  HistogramView d = *this;
  if (earlier.buckets.size() != buckets.size() || earlier.count > count) return d;  // a reset
  d.count -= earlier.count;
  d.sum -= earlier.sum;
  for (size_t i = 0; i < buckets.size(); ++i) d.buckets[i].second -= earlier.buckets[i].second;
  return d;
}

uint64_t OperationView::finished() const {
  uint64_t n = 0;
  for (const auto& [_, h] : duration) n += h.count;
  return n;
}

// The limits' rows (the reader joined each limit's series once) in key
// order, as people read them: limit_rank_[k] is row k's place.
void ViewBuilder::reshape_limits(const Snapshot& snap, std::map<std::string, uint32_t>& ranked) {
  std::vector<LimitView> limits;
  for (const LimitRow& row : snap.limits) {
    const SeriesInfo& info = *snap.series[row.any()].info;
    LimitView l;
    l.component = label_of(info, label::kComponent);
    l.limit_name = label_of(info, label::kLimitName);
    l.server_name = label_of(info, label::kServerName);
    ranked.emplace(l.key(), uint32_t(limits.size()));
    limits.push_back(std::move(l));
  }
  limit_rank_.assign(limits.size(), 0);
  limits_.assign(limits.size(), LimitView{});
  uint32_t r = 0;
  for (auto& [_, k] : ranked) {
    limit_rank_[k] = r;
    limits_[r] = std::move(limits[k]);
    k = r++;
  }
}

void ViewBuilder::reshape_limit_extras(const Snapshot& snap,
                                       const std::map<std::string, uint32_t>& ranked) {
  for (size_t i = 0; i < snap.series.size(); ++i) {
    const SeriesInfo& info = *snap.series[i].info;
    const Field field = info.family == family::kConcurrencyWaitDuration  ? Field::kLimitWait
                        : info.family == family::kConcurrencyHoldSeconds ? Field::kLimitHeld
                        : info.family == family::kConcurrencyOldestWait  ? Field::kLimitOldestWait
                                                                         : Field::kNone;
    if (field == Field::kNone) continue;
    LimitView l;
    l.component = label_of(info, label::kComponent);
    l.limit_name = label_of(info, label::kLimitName);
    l.server_name = label_of(info, label::kServerName);
    auto it = ranked.find(l.key());
    if (it != ranked.end()) slots_[i] = Slot{field, it->second, {}};
  }
}

// The operations: their series joined by their labels, in key order.
void ViewBuilder::reshape(const Snapshot& snap) {
  std::map<std::string, uint32_t> ranked;
  reshape_limits(snap, ranked);
  slots_.assign(snap.series.size(), Slot{});
  reshape_limit_extras(snap, ranked);
  std::map<std::string, uint32_t> op_rows;
  std::vector<OperationView> ops;
  const std::pair<std::string_view, Field> fields[] = {
      {family::kOperationQueued, Field::kQueued},
      {family::kOperationActive, Field::kActive},
      {family::kOperationQueueDuration, Field::kQueueDuration},
      {family::kOperationOldestQueued, Field::kOldestQueued},
      {family::kOperationOldestActive, Field::kOldestActive},
      {family::kOperationDuration, Field::kDuration}};
  const std::string_view* run = nullptr;  // the snapshot groups families
  Field field = Field::kNone;
  for (size_t i = 0; i < snap.series.size(); ++i) {
    const SeriesInfo& info = *snap.series[i].info;
    if (run == nullptr || *run != info.family) {
      run = &info.family;
      field = Field::kNone;
      for (const auto& [name, f] : fields)
        if (info.family == name) field = f;
    }
    if (field == Field::kNone) continue;
    Slot& slot = slots_[i];
    slot.field = field;
    OperationView o;
    o.operation = label_of(info, label::kOperation);
    o.executor = label_of(info, label::kExecutor);
    o.server_name = label_of(info, label::kServerName);
    auto [it, fresh] = op_rows.try_emplace(o.key(), uint32_t(ops.size()));
    if (fresh) ops.push_back(std::move(o));
    slot.row = it->second;
    if (field == Field::kDuration) slot.outcome = label_of(info, label::kOutcome);
  }
  std::vector<uint32_t> op_rank(ops.size());
  uint32_t r = 0;
  for (const auto& [_, row] : op_rows) op_rank[row] = r++;
  operations_.assign(ops.size(), OperationView{});
  for (size_t k = 0; k < ops.size(); ++k) operations_[op_rank[k]] = std::move(ops[k]);
  for (Slot& slot : slots_)
    if (slot.field != Field::kNone && slot.field < Field::kLimitWait) slot.row = op_rank[slot.row];
  static std::atomic<uint64_t> shapes{0};
  shape_ = ++shapes;
}

void ViewBuilder::fill(const Snapshot& snap, View& out) const {
  if (out.shape != shape_) {
    out.limits = limits_;
    out.operations = operations_;
    out.shape = shape_;
  }
  for (size_t k = 0; k < snap.limits.size(); ++k) {
    const LimitRow& row = snap.limits[k];
    LimitView& l = out.limits[limit_rank_[k]];
    l.limit = row.limit;
    l.available = row.free;
    l.active = row.active;
    l.queue_depth = row.queued;
    l.holds = row.holds_now;
    l.processes = row.processes;
    l.stranded_slots = row.stranded_slots;
    if (row.timeouts != LimitRow::kNone)
      l.admission_timeouts_total = snap.series[row.timeouts].counter;
    l.admission_cancelled_total =
        row.cancelled != LimitRow::kNone ? snap.series[row.cancelled].counter : 0;
    l.admissions_total = row.holds != LimitRow::kNone ? snap.series[row.holds].counter : 0;
    l.oldest_hold_seconds = row.oldest_hold_seconds;
  }
  for (OperationView& o : out.operations) o.queue_duration = {};  // summed below
  for (LimitView& l : out.limits) {
    l.wait_duration = {};
    l.hold_seconds_total.reset();
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    const SeriesSample& s = snap.series[i];
    switch (slot.field) {
      case Field::kNone:
        break;
      case Field::kQueued:
        out.operations[slot.row].queued = s.gauge;
        break;
      case Field::kActive:
        out.operations[slot.row].active = s.gauge;
        break;
      case Field::kQueueDuration:
        add_histogram(out.operations[slot.row].queue_duration, s);  // every way a wait ended
        break;
      case Field::kLimitWait:
        add_histogram(out.limits[slot.row].wait_duration, s);  // every way a wait ended
        break;
      case Field::kOldestQueued:
        out.operations[slot.row].oldest_queued_seconds = age_seconds(snap, s);
        break;
      case Field::kOldestActive:
        out.operations[slot.row].oldest_active_seconds = age_seconds(snap, s);
        break;
      case Field::kLimitOldestWait:
        out.limits[slot.row].oldest_wait_seconds = age_seconds(snap, s);
        break;
      case Field::kLimitHeld:
        out.limits[slot.row].hold_seconds_total = double(s.counter) / s.info->unit_divisor;
        break;
      case Field::kDuration:
        assign_histogram(out.operations[slot.row].duration[slot.outcome], s);
        break;
    }
  }
}

// Each declared server's event-loop lag and blocked time (the gym_python_
// event-loop series carrying its name).
void add_runtimes(const Snapshot& snap, const std::map<std::string, size_t>& row, View& v) {
  for (const SeriesSample& s : snap.series) {
    const bool lag = s.info->family == family::kEventLoopLag;
    if (!lag && s.info->family != family::kEventLoopBlocked) continue;
    auto it = row.find(label_of(*s.info, label::kServerName));
    if (it == row.end()) continue;
    ServerView& server = v.servers[it->second];
    if (lag)
      assign_histogram(server.loop_lag.emplace(), s);
    else if (s.in_progress)
      server.loop_blocked_seconds = age_seconds(snap, s);
  }
}

namespace {
// One row a server: the servers unit's (those up at its last sample), its
// numbers from each collector's last sample; then declarers that no sample
// has seen yet, without numbers.
void add_servers(const Snapshot& snap, const BoardFigures& figures, View& v,
                 std::map<std::string, size_t>& row) {
  v.servers.clear();
  v.samples.clear();
  for (const auto& [source, f] : figures) v.samples[source] = f->time_seconds;
  if (auto it = figures.find("servers"); it != figures.end())
    for (const auto& [name, r] : it->second->servers) {
      row.emplace(name, v.servers.size());
      ServerView s;
      s.server_name = name;
      s.server_type = r.server_type;
      s.pid = r.pid.value_or(0);
      s.oldest_process_seconds = r.oldest_process_seconds;
      v.servers.push_back(std::move(s));
    }
  for (const auto& [source, f] : figures)
    for (const auto& [name, r] : f->servers) {
      auto it = row.find(name);
      if (it == row.end()) continue;
      ServerView& s = v.servers[it->second];
      if (r.rss_bytes) s.rss_bytes = r.rss_bytes;
      if (r.processes) s.processes = r.processes;
      if (r.gpu_bytes) s.gpu_bytes = r.gpu_bytes;
      if (r.gpu_fullest_ratio) s.gpu_fullest_ratio = r.gpu_fullest_ratio;
      if (r.cpu_periods) s.cpu_periods = r.cpu_periods;
      if (r.cpu_throttled_periods) s.cpu_throttled_periods = r.cpu_throttled_periods;
      if (r.oom_kills) s.oom_kills = r.oom_kills;
    }
  for (const DeclaredServer& d : snap.servers)
    if (row.emplace(d.name, v.servers.size()).second) {
      ServerView s;
      s.server_name = d.name;
      s.server_type = d.server_type;
      s.pid = d.pid;
      v.servers.push_back(std::move(s));
    }
}
}  // namespace

void ViewBuilder::build(const Snapshot& snap, const std::string& registry_dir,
                        const BoardFigures& figures, View& v) {
  v.time_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  v.registry_dir = registry_dir;
  scratch_.clear();
  for (const SeriesSample& s : snap.series) scratch_.push_back(s.info);
  if (scratch_ != infos_ || snap.series_epoch != epoch_) {
    infos_.swap(scratch_);
    epoch_ = snap.series_epoch;
    reshape(snap);
  }
  fill(snap, v);
  std::map<std::string, size_t> row;
  add_servers(snap, figures, v, row);
  std::map<pid_t, std::string> declared;
  for (const DeclaredServer& d : snap.servers) declared[d.pid] = d.name;
  add_runtimes(snap, row, v);
  v.writers.clear();
  const auto servers = figures.find("servers");
  const double boot_time = servers != figures.end() ? servers->second->boot_seconds : 0;
  for (const WriterInfo& w : snap.writers) {
    const double start =
        boot_time > 0 ? procfs::started_unix_seconds(uint64_t(boot_time), w.start_ticks) : 0;
    auto it = declared.find(w.pid);
    v.writers.push_back(
        {w.pid, start, w.format_version, w.unmetered, it == declared.end() ? "" : it->second});
  }
}

View make_view(const Snapshot& snap, const std::string& registry_dir, const BoardFigures& figures) {
  View v;
  ViewBuilder().build(snap, registry_dir, figures, v);
  return v;
}

}  // namespace gym::exporter
