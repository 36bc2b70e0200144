#include "snapshot/verdict.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>

#include "snapshot/subjects.h"

namespace gym::exporter {

namespace {

using Evidence = std::vector<std::pair<std::string, double>>;
constexpr double kNever = std::numeric_limits<double>::infinity();

struct CauseText {
  const char* cause;
  const char* words;
  const char* cannot_tell;
};
constexpr CauseText kCauses[] = {
    {"limit_too_small", "limit too small",
     "whether what its holders use (CPU, a model, a sandbox) has room for more slots"},
    {"stranded_slots", "slots stranded in idle processes",
     "how callers are routed to the processes of the limit (not recorded)"},
    {"starved_cpu", "CPU-starved: its cgroups are throttled",
     "whether the throttled time falls inside these holds: throttling is the server's whole"},
    {"blocked_event_loop", "event loop blocked",
     "which callback blocks the loop (a profiler of the process can say)"},
    {"memory", "out of memory (OOM kills or a full GPU)",
     "which process was killed: /api/v1/deaths lists them"},
    {"queue_dominates", "waits longer than it runs",
     "which limit it waits for: an operation is not linked to its limit in the data"},
};

// A server's trouble over the window: every condition met, as evidence;
// the cause is the most telling (memory, then a blocked loop, then CPU).
struct Condition {
  std::string cause;
  double severity = 0;
  Evidence evidence;
};

const ServerView* server_in(const View& v, const std::string& name) {
  for (const ServerView& s : v.servers)
    if (s.server_name == name) return &s;
  return nullptr;
}

void met(Condition& c, const char* cause, double severity) {
  if (c.cause.empty()) {
    c.cause = cause;
    c.severity = std::min(severity, 1.0);
  }
}

std::optional<Condition> condition(const Window& w, const ServerView& now, const VerdictRules& r) {
  const ServerView* was = server_in(w.first, now.server_name);
  if (w.seconds() <= 0) was = nullptr;  // a window of one View: no increase known
  Condition c;
  if (was && now.oom_kills && was->oom_kills && *now.oom_kills > *was->oom_kills) {
    c.evidence.emplace_back("oom_kills", double(*now.oom_kills - *was->oom_kills));
    met(c, "memory", 1);
  }
  if (now.gpu_fullest_ratio && *now.gpu_fullest_ratio >= r.gpu_memory_ratio) {
    c.evidence.emplace_back("gpu_fullest_memory_ratio", *now.gpu_fullest_ratio);
    met(c, "memory", *now.gpu_fullest_ratio);
  }
  const double blocked = now.loop_blocked_seconds.value_or(0);
  std::optional<double> lag;
  if (now.loop_lag)
    lag =
        (was && was->loop_lag ? now.loop_lag->minus(*was->loop_lag) : *now.loop_lag).quantile(0.99);
  if (blocked >= r.loop_blocked_seconds || (lag && *lag >= r.loop_lag_p99_seconds)) {
    c.evidence.emplace_back("event_loop_blocked_seconds", blocked);
    if (lag) c.evidence.emplace_back("event_loop_lag_p99_seconds", *lag);
    met(c, "blocked_event_loop", std::max(blocked / 10, lag.value_or(0)));
  }
  if (was && now.cpu_periods && was->cpu_periods && *now.cpu_periods > *was->cpu_periods) {
    const double share = double(now.cpu_throttled_periods.value_or(0) -
                                std::min(now.cpu_throttled_periods.value_or(0),
                                         was->cpu_throttled_periods.value_or(0))) /
                         double(*now.cpu_periods - *was->cpu_periods);
    if (share >= r.throttled_share) {
      c.evidence.emplace_back("cpu_throttled_share", share);
      met(c, "starved_cpu", share);
    }
  }
  if (c.cause.empty()) return std::nullopt;
  return c;
}

// A limit's rates over the window (none in a window of one View; since
// zero for a limit first seen in it).
void limit_rates(const Window& w, const LimitView& now, Evidence& e) {
  const double t = w.seconds();
  if (t <= 0) return;
  const LimitView* first = row_with_key(w.first.limits, now.key());
  const LimitView none;
  const LimitView* was = first != nullptr ? first : &none;
  const double admitted =
      double(now.admissions_total - std::min(now.admissions_total, was->admissions_total));
  e.emplace_back("admissions_per_second", admitted / t);
  const HistogramView waits = now.wait_duration.minus(was->wait_duration);
  if (waits.count > 0) {
    e.emplace_back("wait_mean_seconds", waits.sum / double(waits.count));
    e.emplace_back("wait_p99_seconds", waits.quantile(0.99).value_or(0));
  }
  if (now.admission_timeouts_total)
    e.emplace_back(
        "timeouts_per_second",
        double(*now.admission_timeouts_total -
               std::min(*now.admission_timeouts_total, was->admission_timeouts_total.value_or(0))) /
            t);
  e.emplace_back("cancelled_per_second",
                 double(now.admission_cancelled_total -
                        std::min(now.admission_cancelled_total, was->admission_cancelled_total)) /
                     t);
  if (now.hold_seconds_total && (first == nullptr || was->hold_seconds_total) && admitted > 0)
    e.emplace_back("hold_mean_seconds",
                   (*now.hold_seconds_total - was->hold_seconds_total.value_or(0)) / admitted);
}

void limit_entries(const Window& w, const VerdictRules& r, std::vector<VerdictEntry>& out) {
  for (const LimitView& l : w.last.limits) {
    auto t = w.limits.find(l.key());
    if (!l.present() || t == w.limits.end()) continue;
    const double waiting = w.mean(t->second.queue), held = w.mean(t->second.active);
    const double stranded = w.mean(t->second.stranded), saturation = held / double(l.limit);
    const bool is_stranded = stranded >= r.stranded_slots;
    if (waiting < r.min_waiting || (saturation < r.saturation && !is_stranded)) continue;
    VerdictEntry e{"limit", subject(l), l.server_name, "limit_too_small", waiting, {}, {}};
    e.evidence = {{"slots", double(l.limit)},        {"waiting_mean", waiting},
                  {"saturation", saturation},        {"held_mean", held},
                  {"stranded_slots_mean", stranded}, {"processes", double(l.processes)}};
    limit_rates(w, l, e.evidence);
    const ServerView* s = l.server_name.empty() ? nullptr : server_in(w.last, l.server_name);
    if (std::optional<Condition> c = s ? condition(w, *s, r) : std::nullopt) {
      e.cause = c->cause;
      e.evidence.insert(e.evidence.end(), c->evidence.begin(), c->evidence.end());
    }
    if (is_stranded) e.cause = "stranded_slots";
    out.push_back(std::move(e));
  }
}

// Queue time over run time: the durations' increases over the window (all
// of them for an operation first seen in it; infinite when it waited and
// ran nothing); in a window of one View, by Little's law the mean queued
// over the mean active (the same arrivals wait and then run).
double queue_over_run(const Window& w, const OperationView& now, double queued, double active,
                      Evidence& e) {
  if (w.seconds() <= 0) return active > 0 ? queued / active : (queued > 0 ? kNever : 0);
  const OperationView* first = row_with_key(w.first.operations, now.key());
  const OperationView none;
  const OperationView& was = first != nullptr ? *first : none;
  double run_s = 0, finished = 0;
  const double queue_s = now.queue_duration.minus(was.queue_duration).sum;
  for (const auto& [outcome, h] : now.duration) {
    auto it = was.duration.find(outcome);
    const HistogramView d = it == was.duration.end() ? h : h.minus(it->second);
    run_s += d.sum;
    finished += double(d.count);
  }
  e.emplace_back("finished_per_second", finished / w.seconds());
  if (finished > 0) {
    e.emplace_back("run_mean_seconds", run_s / finished);
    e.emplace_back("queue_mean_seconds", queue_s / finished);
  }
  return run_s > 0 ? queue_s / run_s : (queue_s > 0 ? kNever : 0);
}

void operation_entries(const Window& w, const VerdictRules& r, std::vector<VerdictEntry>& out) {
  // Servers with a limit entry ("" for limits with no server): their
  // operations are taken to wait there.
  std::set<std::string> limited;
  for (const VerdictEntry& e : out) limited.insert(e.server_name);
  for (const OperationView& o : w.last.operations) {
    auto t = w.operations.find(o.key());
    if (t == w.operations.end() || limited.contains(o.server_name)) continue;
    const double queued = w.mean(t->second.queue), active = w.mean(t->second.active);
    if (queued < r.min_waiting) continue;
    Evidence rates;
    const double ratio = queue_over_run(w, o, queued, active, rates);
    if (ratio < r.queue_over_run) continue;
    VerdictEntry e{"operation", subject(o), o.server_name, "queue_dominates", queued, {}, {}};
    e.evidence = {{"queued_mean", queued}, {"active_mean", active}, {"queue_over_run", ratio}};
    e.evidence.insert(e.evidence.end(), rates.begin(), rates.end());
    const ServerView* s = o.server_name.empty() ? nullptr : server_in(w.last, o.server_name);
    if (std::optional<Condition> c = s ? condition(w, *s, r) : std::nullopt) {
      e.cause = c->cause;
      e.evidence.insert(e.evidence.end(), c->evidence.begin(), c->evidence.end());
    }
    out.push_back(std::move(e));
  }
}

void server_entries(const Window& w, const VerdictRules& r, std::vector<VerdictEntry>& out) {
  std::set<std::string> placed;
  for (const VerdictEntry& e : out) placed.insert(e.server_name);
  for (const ServerView& s : w.last.servers) {
    if (placed.contains(s.server_name)) continue;
    std::optional<Condition> c = condition(w, s, r);
    if (!c) continue;
    out.push_back({"server",
                   s.server_name,
                   s.server_name,
                   c->cause,
                   0.1 * c->severity,
                   std::move(c->evidence),
                   {}});
  }
}

int place_order(const std::string& place) {
  return place == "limit" ? 0 : place == "operation" ? 1 : 2;
}

}  // namespace

const char* cause_words(const std::string& cause) {
  for (const CauseText& c : kCauses)
    if (cause == c.cause) return c.words;
  return "?";
}

Window window_of(const View& v) {
  WindowSampler s(std::numeric_limits<double>::infinity());
  s.add(v);
  return s.open();
}

Verdict verdict(const Window& w, const VerdictRules& rules) {
  Verdict v;
  v.start_seconds = w.first.time_seconds;
  v.end_seconds = w.last.time_seconds;
  limit_entries(w, rules, v.entries);
  operation_entries(w, rules, v.entries);
  server_entries(w, rules, v.entries);
  for (VerdictEntry& e : v.entries)
    for (const CauseText& c : kCauses)
      if (e.cause == c.cause) e.cannot_tell = c.cannot_tell;
  std::stable_sort(v.entries.begin(), v.entries.end(),
                   [](const VerdictEntry& a, const VerdictEntry& b) {
                     if (a.score != b.score) return a.score > b.score;
                     if (a.place != b.place) return place_order(a.place) < place_order(b.place);
                     return a.subject < b.subject;
                   });
  v.checks = littles_law(w);
  std::stable_partition(v.checks.begin(), v.checks.end(),
                        [](const LawCheck& c) { return !c.holds(); });
  return v;
}

std::string describe(const VerdictEntry& e) {
  std::string out = e.place + " " + e.subject + ": " + cause_words(e.cause);
  const size_t shown = std::min<size_t>(e.evidence.size(), 4);
  for (size_t i = 0; i < shown; ++i) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s %s=%.3g", i == 0 ? " —" : ",", e.evidence[i].first.c_str(),
                  e.evidence[i].second);
    out += buf;
  }
  return out;
}

std::string headline(const Verdict& v) {
  return v.entries.empty() ? "no bottleneck" : "bottleneck: " + describe(v.entries.front());
}

}  // namespace gym::exporter
