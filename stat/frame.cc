#include "frame.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace gym::stat {

using exporter::HistogramView;
using exporter::LimitView;
using exporter::OperationView;
using exporter::ServerView;
using exporter::View;

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Control characters (a label value may hold an escape sequence) as '?'.
std::string printable(std::string s) {
  for (char& c : s)
    if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
  return s;
}

std::string pad(std::string s, size_t w) {
  s = printable(std::move(s));
  if (s.size() > w) s = s.substr(0, w > 1 ? w - 1 : w) + (w > 1 ? "~" : "");
  s.resize(w, ' ');
  return s;
}

std::string seconds(std::optional<double> v) {
  if (!v) return "-";
  if (*v < 1) return fmt("%.0fms", *v * 1000);
  return fmt("%.2fs", *v);
}

std::string bytes(std::optional<uint64_t> v) {
  if (!v) return "-";
  return fmt("%.1fMiB", double(*v) / (1 << 20));
}

bool matches(const std::string& filter, std::initializer_list<const std::string*> fields) {
  if (filter.empty()) return true;
  for (const std::string* f : fields)
    if (f->find(filter) != std::string::npos) return true;
  return false;
}

// The row of `previous` that `row` (of `now`) continues: same index when both
// views have one shape (the common case: no lookup), else by key.
template <class T>
class Before {
 public:
  Before(const std::vector<T>& now, const std::vector<T>* previous, bool same_shape)
      : now_(now), previous_(previous), same_(same_shape) {
    if (previous_ && !same_)
      for (const T& x : *previous_) by_key_[x.key()] = &x;
  }
  const T* operator()(const T& row) const {
    if (previous_ == nullptr) return nullptr;
    if (same_) return &(*previous_)[size_t(&row - now_.data())];
    auto it = by_key_.find(row.key());
    return it == by_key_.end() ? nullptr : it->second;
  }

 private:
  const std::vector<T>& now_;
  const std::vector<T>* previous_;
  bool same_;
  std::map<std::string, const T*> by_key_;
};

bool room(const std::vector<Line>& out, const FrameOptions& o) {
  return o.max_lines == 0 || out.size() < o.max_lines;
}

double saturation(const LimitView& l) {
  return l.limit > 0 ? std::clamp(double(l.active) / double(l.limit), 0.0, 1.0) : 0;
}

void limit_lines(const View& now, const View* prev, double dt, const FrameOptions& o,
                 std::vector<Line>& out) {
  std::vector<const LimitView*> rows;
  for (const LimitView& l : now.limits)
    if (l.present() && matches(o.filter, {&l.server_name, &l.component, &l.limit_name}))
      rows.push_back(&l);
  std::stable_sort(rows.begin(), rows.end(), [&](const LimitView* a, const LimitView* b) {
    if (o.sort == Sort::kSaturation && saturation(*a) != saturation(*b))
      return saturation(*a) > saturation(*b);
    if (o.sort == Sort::kQueue && a->queue_depth != b->queue_depth)
      return a->queue_depth > b->queue_depth;
    return a->key() < b->key();
  });
  const Before<LimitView> before(now.limits, prev ? &prev->limits : nullptr,
                                 prev && prev->shape == now.shape && now.shape != 0);
  out.push_back({Line::Kind::kTitle, "LIMITS (" + std::to_string(rows.size()) + ")"});
  out.push_back({Line::Kind::kHeader, pad("SERVER", 18) + pad("COMPONENT", 17) + pad("LIMIT", 20) +
                                          pad("SATURATION", 23) + pad("ACTIVE", 10) +
                                          pad("QUEUE", 7) + pad("PROCS", 6) + pad("STRANDED", 9) +
                                          pad("TIMEOUT/s", 10) + "CANCEL/s"});
  for (const LimitView* l : rows) {
    if (!room(out, o)) break;
    const LimitView* was = before(*l);
    std::string timeouts = "-", cancels = "-";
    if (was != nullptr && dt > 0) {
      if (l->admission_timeouts_total)
        timeouts = fmt(
            "%.1f",
            double(*l->admission_timeouts_total - was->admission_timeouts_total.value_or(0)) / dt);
      cancels =
          fmt("%.1f", double(l->admission_cancelled_total - was->admission_cancelled_total) / dt);
    }
    Line line;
    line.text = pad(l->server_name.empty() ? "-" : l->server_name, 18) + pad(l->component, 17) +
                pad(l->limit_name, 20);
    line.bar_at = line.text.size() + 1;
    line.bar_width = 20;
    line.fill = saturation(*l);
    const size_t filled = size_t(std::lround(line.fill * 20));
    line.text += "[" + std::string(filled, '#') + std::string(20 - filled, '.') + "] ";
    line.text += pad(std::to_string(l->active) + "/" + std::to_string(l->limit), 10) +
                 pad(std::to_string(l->queue_depth), 7) + pad(std::to_string(l->processes), 6) +
                 pad(std::to_string(l->stranded_slots), 9) + pad(timeouts, 10) + cancels;
    out.push_back(line);
  }
}

void operation_lines(const View& now, const View* prev, double dt, const FrameOptions& o,
                     std::vector<Line>& out) {
  const Before<OperationView> before(now.operations, prev ? &prev->operations : nullptr,
                                     prev && prev->shape == now.shape && now.shape != 0);
  out.push_back({Line::Kind::kTitle, "OPERATIONS (p50/p99 and rates over the last refresh)"});
  std::string head = pad("SERVER", 18) + pad("OPERATION", 10) + pad("EXECUTOR", 11) +
                     pad("QUEUED", 7) + pad("ACTIVE", 7) + pad("RATE/s", 8);
  for (const char* oc : {"OK%", "ERR%", "TMO%", "CNC%", "CRS%"}) head += pad(oc, 6);
  out.push_back({Line::Kind::kHeader, head + pad("P50", 8) + "P99"});
  for (const OperationView& op : now.operations) {
    if (!room(out, o)) break;
    if (!matches(o.filter, {&op.server_name, &op.operation, &op.executor})) continue;
    const OperationView* was = before(op);
    HistogramView all;
    std::map<std::string, uint64_t> by_outcome;
    for (const auto& [outcome, h] : op.duration) {
      if (was == nullptr) break;  // no window yet
      auto w = was->duration.find(outcome);
      const HistogramView d = w != was->duration.end() ? h.minus(w->second) : h;
      by_outcome[outcome] = d.count;
      if (all.buckets.empty())
        all = d;
      else if (all.buckets.size() == d.buckets.size()) {
        all.count += d.count;
        for (size_t i = 0; i < d.buckets.size(); ++i) all.buckets[i].second += d.buckets[i].second;
      }
    }
    std::string row = pad(op.server_name.empty() ? "-" : op.server_name, 18) +
                      pad(op.operation, 10) + pad(op.executor, 11) +
                      pad(std::to_string(op.queued), 7) + pad(std::to_string(op.active), 7) +
                      pad(was && dt > 0 ? fmt("%.1f", double(all.count) / dt) : "-", 8);
    for (const char* oc : {"ok", "error", "timeout", "cancelled", "crashed"})
      row +=
          pad(all.count ? fmt("%.0f", 100.0 * double(by_outcome[oc]) / double(all.count)) : "-", 6);
    row += pad(seconds(all.quantile(0.5)), 8) + seconds(all.quantile(0.99));
    out.push_back({Line::Kind::kRow, row});
  }
}

// A server's event-loop lag p99 over the window since `prev` (since the
// start without one), and how long its loop is blocked now.
std::string loop_columns(const ServerView& s, const View* prev) {
  if (!s.loop_lag) return pad("-", 10) + pad("-", 9);
  HistogramView lag = *s.loop_lag;
  if (prev != nullptr)
    for (const ServerView& was : prev->servers)
      if (was.server_name == s.server_name && was.loop_lag &&
          was.loop_lag->buckets.size() == lag.buckets.size() && was.loop_lag->count <= lag.count)
        lag = lag.minus(*was.loop_lag);
  return pad(seconds(lag.quantile(0.99)), 10) + pad(seconds(s.loop_blocked_seconds), 9);
}

// A server's throttled share of CFS periods over the window since `prev`
// (since its cgroups were first seen without one), and its OOM kills.
std::string cgroup_columns(const ServerView& s, const View* prev) {
  uint64_t periods = s.cpu_periods.value_or(0), throttled = s.cpu_throttled_periods.value_or(0);
  if (prev != nullptr)
    for (const ServerView& was : prev->servers)
      if (was.server_name == s.server_name && was.cpu_periods && *was.cpu_periods <= periods &&
          was.cpu_throttled_periods.value_or(0) <= throttled) {
        periods -= *was.cpu_periods;
        throttled -= was.cpu_throttled_periods.value_or(0);
      }
  const std::string share = !s.cpu_periods ? "-"
                            : periods == 0
                                ? "0%"
                                : fmt("%.0f%%", 100.0 * double(throttled) / double(periods));
  return pad(share, 11) + (s.oom_kills ? std::to_string(*s.oom_kills) : "-");
}

// The last minute's deaths of servers' processes, newest first (gym-stat
// follows the kernel's process events as the exporter does, as root).
void death_lines(const View& now, const FrameOptions& o, std::vector<Line>& out) {
  if (!now.deaths_followed) return;
  out.push_back(
      {Line::Kind::kTitle, "DEATHS (last minute: " + std::to_string(now.deaths.size()) + ")"});
  out.push_back({Line::Kind::kHeader, pad("AGO", 8) + pad("SERVER", 22) + pad("PID", 9) +
                                          pad("COMMAND", 17) + pad("REASON", 14) + pad("CODE", 11) +
                                          "LIVED"});
  for (auto d = now.deaths.rbegin(); d != now.deaths.rend(); ++d) {
    if (!room(out, o)) break;
    if (!matches(o.filter, {&d->server, &d->command})) continue;
    const std::string code = d->exit_code ? "exit " + std::to_string(*d->exit_code)
                             : d->signal  ? "signal " + std::to_string(*d->signal)
                                          : "-";
    out.push_back({Line::Kind::kRow, pad(fmt("%.0fs", now.time_seconds - d->time), 8) +
                                         pad(d->server, 22) + pad(std::to_string(d->pid), 9) +
                                         pad(d->command, 17) + pad(d->reason, 14) + pad(code, 11) +
                                         seconds(d->lifetime_seconds)});
  }
}

void server_and_writer_lines(const View& now, const View* prev, const FrameOptions& o,
                             std::vector<Line>& out) {
  out.push_back({Line::Kind::kTitle, "SERVERS"});
  out.push_back({Line::Kind::kHeader, pad("SERVER", 22) + pad("TYPE", 18) + pad("PID", 9) +
                                          pad("RSS", 12) + pad("GPU MEM", 12) +
                                          pad("PROCESSES", 11) + pad("LAG P99", 10) +
                                          pad("BLOCKED", 9) + pad("THROTTLED", 11) + "OOM"});
  for (const auto& s : now.servers) {
    if (!room(out, o)) break;
    if (!matches(o.filter, {&s.server_name, &s.server_type})) continue;
    out.push_back({Line::Kind::kRow, pad(s.server_name, 22) + pad(s.server_type, 18) +
                                         pad(std::to_string(s.pid), 9) +
                                         pad(bytes(s.rss_bytes), 12) + pad(bytes(s.gpu_bytes), 12) +
                                         pad(s.processes ? std::to_string(*s.processes) : "-", 11) +
                                         loop_columns(s, prev) + cgroup_columns(s, prev)});
  }
  death_lines(now, o, out);
  out.push_back({Line::Kind::kTitle, "WRITERS (" + std::to_string(now.writers.size()) + ")"});
  out.push_back({Line::Kind::kHeader,
                 pad("PID", 9) + pad("SERVER", 22) + pad("AGE", 10) + pad("FORMAT", 8) + "STATE"});
  for (const auto& w : now.writers) {
    if (!room(out, o)) break;
    if (!matches(o.filter, {&w.server_name})) continue;
    const double age = w.start_time_seconds > 0 ? now.time_seconds - w.start_time_seconds : -1;
    out.push_back({Line::Kind::kRow, pad(std::to_string(w.pid), 9) +
                                         pad(w.server_name.empty() ? "-" : w.server_name, 22) +
                                         pad(age >= 0 ? fmt("%.0fs", age) : "-", 10) +
                                         pad("v" + std::to_string(w.format_version), 8) +
                                         (w.unmetered ? "unmetered" : "ok")});
  }
}

// The verdict's headline first, then its entries ranked and the checks of
// Little's law that drift (marked "!"), or how many hold.
void verdict_lines(const exporter::Verdict& v, const FrameOptions& o, std::vector<Line>& out) {
  out.insert(out.begin(), {Line::Kind::kTitle, printable(exporter::headline(v))});
  size_t drifting = 0;
  for (const exporter::LawCheck& c : v.checks) drifting += c.holds() ? 0 : 1;
  const std::string law = v.checks.empty() ? "no check (too little traffic or time)"
                          : drifting       ? std::to_string(drifting) + " of " +
                                           std::to_string(v.checks.size()) + " checks drift"
                                     : "all " + std::to_string(v.checks.size()) + " hold";
  out.push_back({Line::Kind::kTitle,
                 "VERDICT (window " + fmt("%.0fs", v.end_seconds - v.start_seconds) + ", " +
                     std::to_string(v.entries.size()) + " entries; Little's law: " + law + ")"});
  for (size_t i = 0; i < v.entries.size() && room(out, o); ++i)
    out.push_back({Line::Kind::kRow,
                   printable(std::to_string(i + 1) + ". " + exporter::describe(v.entries[i]) +
                             fmt(" [score %.2f]", v.entries[i].score))});
  for (const exporter::LawCheck& c : v.checks) {
    if (c.holds() || !room(out, o)) continue;
    out.push_back(
        {Line::Kind::kRow, printable("! " + c.place + " " + c.subject + " " + c.quantity +
                                     fmt(": mean %.3g", c.mean) + fmt(" vs %.3g/s", c.per_second) +
                                     fmt(" (tolerance %.3g)", c.tolerance))});
  }
  out.push_back({Line::Kind::kBlank, ""});
}

}  // namespace

const char* sort_name(Sort s) {
  switch (s) {
    case Sort::kSaturation:
      return "saturation";
    case Sort::kQueue:
      return "queue";
    case Sort::kName:
      return "name";
  }
  return "?";
}

std::vector<Line> frame(const View& now, const View* previous, const FrameOptions& options,
                        const exporter::Verdict* verdict) {
  const double dt = previous ? now.time_seconds - previous->time_seconds : 0;
  std::vector<Line> out;
  out.push_back({Line::Kind::kTitle,
                 "gym-stat  " + now.registry_dir + "  " + std::to_string(now.writers.size()) +
                     " writers  sort: " + sort_name(options.sort) +
                     (options.filter.empty() ? "" : "  filter: " + options.filter) +
                     "   [s]ort [/]filter [c]lear [q]uit"});
  out.push_back({Line::Kind::kBlank, ""});
  if (verdict != nullptr) verdict_lines(*verdict, options, out);
  limit_lines(now, previous, dt, options, out);
  out.push_back({Line::Kind::kBlank, ""});
  operation_lines(now, previous, dt, options, out);
  out.push_back({Line::Kind::kBlank, ""});
  server_and_writer_lines(now, previous, options, out);
  return out;
}

std::string plain(const std::vector<Line>& lines) {
  std::string out;
  for (const Line& l : lines) {
    std::string t = printable(l.text);
    while (!t.empty() && t.back() == ' ') t.pop_back();
    out += t + "\n";
  }
  return out;
}

}  // namespace gym::stat
