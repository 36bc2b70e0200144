// The JSON form of a View (docs/snapshot.schema.json).
#include <cmath>
#include <cstdio>
#include <optional>

#include "json_text.h"
#include "snapshot/verdict.h"
#include "snapshot/view.h"

namespace gym::exporter {

namespace {

// Appends JSON; commas go in by themselves (after a value, before the next).
class Json {
 public:
  std::string out;
  void str(const std::string& s) {
    separate();
    out += json_quote(s);
    after_value_ = true;
  }
  void num(double v) {
    if (!std::isfinite(v)) return literal("null");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    literal(buf);
  }
  void literal(const char* s) {
    separate();
    out += s;
    after_value_ = true;
  }
  void key(const char* k) {
    str(k);
    out += ':';
    after_value_ = false;
  }
  void open(char c) {
    separate();
    out += c;
    after_value_ = false;
  }
  void close(char c) {
    out += c;
    after_value_ = true;
  }
  void field(const char* k, const std::string& v) {
    key(k);
    str(v);
  }
  void field(const char* k, double v) {
    key(k);
    num(v);
  }
  void optional_string(const char* k, const std::string& v) {
    key(k);
    v.empty() ? literal("null") : str(v);
  }
  template <class T>
  void optional_number(const char* k, const std::optional<T>& v) {
    key(k);
    v ? num(double(*v)) : literal("null");
  }

 private:
  void separate() {
    if (after_value_) out += ',';
  }
  bool after_value_ = false;
};

void histogram(Json& j, const HistogramView& h) {
  j.open('{');
  j.field("count", double(h.count));
  j.field("sum", h.sum);
  j.key("buckets");
  j.open('[');
  for (const auto& [le, n] : h.buckets) {
    j.open('{');
    j.key("le");
    std::isinf(le) ? j.str("+Inf") : j.num(le);
    j.field("count", double(n));
    j.close('}');
  }
  j.close(']');
  j.close('}');
}

void limits(Json& j, const View& v) {
  j.key("limits");
  j.open('[');
  for (const LimitView& l : v.limits) {
    if (!l.present()) continue;
    j.open('{');
    j.field("component", l.component);
    j.field("limit_name", l.limit_name);
    j.optional_string("server_name", l.server_name);
    j.field("limit", double(l.limit));
    j.field("active", double(l.active));
    j.field("available", double(l.available));
    j.field("queue_depth", double(l.queue_depth));
    j.field("processes", double(l.processes));
    j.field("stranded_slots", double(l.stranded_slots));
    j.optional_number("admission_timeouts_total", l.admission_timeouts_total);
    j.field("admission_cancelled_total", double(l.admission_cancelled_total));
    j.field("admissions_total", double(l.admissions_total));
    j.optional_number("hold_seconds_total", l.hold_seconds_total);
    j.key("wait_duration_seconds");
    histogram(j, l.wait_duration);
    j.close('}');
  }
  j.close(']');
}

void operations(Json& j, const View& v) {
  j.key("operations");
  j.open('[');
  for (const OperationView& o : v.operations) {
    j.open('{');
    j.field("operation", o.operation);
    j.field("executor", o.executor);
    j.optional_string("server_name", o.server_name);
    j.field("queued", double(o.queued));
    j.field("active", double(o.active));
    j.key("queue_duration_seconds");
    histogram(j, o.queue_duration);
    j.key("duration_seconds");
    j.open('{');
    for (const auto& [outcome, h] : o.duration) {
      j.key(outcome.c_str());
      histogram(j, h);
    }
    j.close('}');
    j.close('}');
  }
  j.close(']');
}

void servers_and_writers(Json& j, const View& v) {
  j.key("servers");
  j.open('[');
  for (const ServerView& s : v.servers) {
    j.open('{');
    j.field("server_name", s.server_name);
    j.field("server_type", s.server_type);
    j.field("pid", double(s.pid));
    j.optional_number("rss_bytes", s.rss_bytes);
    j.optional_number("processes", s.processes);
    j.optional_number("gpu_memory_bytes", s.gpu_bytes);
    j.optional_number("gpu_fullest_memory_ratio", s.gpu_fullest_ratio);
    j.optional_number("cpu_periods_total", s.cpu_periods);
    j.optional_number("cpu_throttled_periods_total", s.cpu_throttled_periods);
    j.optional_number("oom_kills_total", s.oom_kills);
    j.optional_number("oldest_process_seconds", s.oldest_process_seconds);
    j.key("event_loop_lag_seconds");
    if (s.loop_lag)
      histogram(j, *s.loop_lag);
    else
      j.literal("null");
    j.optional_number("event_loop_blocked_seconds", s.loop_blocked_seconds);
    j.close('}');
  }
  j.close(']');
  j.key("writers");
  j.open('[');
  for (const WriterView& w : v.writers) {
    j.open('{');
    j.field("pid", double(w.pid));
    j.field("start_time_seconds", w.start_time_seconds);
    j.field("format_version", double(w.format_version));
    j.key("unmetered");
    j.literal(w.unmetered ? "true" : "false");
    j.optional_string("server_name", w.server_name);
    j.close('}');
  }
  j.close(']');
}

void verdict_entries(Json& j, const Verdict& v) {
  j.key("entries");
  j.open('[');
  for (const VerdictEntry& e : v.entries) {
    j.open('{');
    j.field("place", e.place);
    j.field("subject", e.subject);
    j.optional_string("server_name", e.server_name);
    j.field("cause", e.cause);
    j.field("score", e.score);
    j.key("evidence");
    j.open('{');
    for (const auto& [name, value] : e.evidence) j.field(name.c_str(), value);
    j.close('}');
    j.field("cannot_tell", e.cannot_tell);
    j.close('}');
  }
  j.close(']');
}

void law_checks(Json& j, const Verdict& v) {
  j.key("littles_law");
  j.open('[');
  for (const LawCheck& c : v.checks) {
    j.open('{');
    j.field("place", c.place);
    j.field("subject", c.subject);
    j.field("quantity", c.quantity);
    j.field("mean", c.mean);
    j.field("per_second", c.per_second);
    j.field("tolerance", c.tolerance);
    j.key("holds");
    j.literal(c.holds() ? "true" : "false");
    j.close('}');
  }
  j.close(']');
}

// The verdict (null before its first window: the exporter's verdict
// collector is off or has not sampled twice).
void verdict(Json& j, const Verdict* v) {
  j.key("verdict");
  if (v == nullptr) return j.literal("null");
  j.open('{');
  j.field("window_start_seconds", v->start_seconds);
  j.field("window_end_seconds", v->end_seconds);
  j.field("headline", headline(*v));
  verdict_entries(j, *v);
  law_checks(j, *v);
  j.close('}');
}

}  // namespace

std::string to_json(const View& v, const Verdict* verdict_now) {
  Json j;
  j.open('{');
  j.field("schema_version", 1.0);
  j.field("time_seconds", v.time_seconds);
  j.key("samples");
  j.open('{');
  for (const auto& [collector, time] : v.samples) j.field(collector.c_str(), time);
  j.close('}');
  j.field("registry_dir", v.registry_dir);
  limits(j, v);
  operations(j, v);
  servers_and_writers(j, v);
  verdict(j, verdict_now);
  j.close('}');
  j.out += '\n';
  return j.out;
}

}  // namespace gym::exporter

namespace gym::exporter {

std::string deaths_json(const std::vector<ProcessDeath>& deaths, const std::string& source) {
  Json j;
  j.open('{');
  j.field("schema_version", 1.0);
  j.field("source", source);
  j.key("deaths");
  j.open('[');
  for (const ProcessDeath& d : deaths) {
    j.open('{');
    j.field("time_seconds", d.time);
    j.field("server_name", d.server);
    j.field("server_type", d.server_type);
    j.field("pid", double(d.pid));
    j.field("parent_pid", double(d.parent));
    j.field("command", d.command);
    j.optional_number("lifetime_seconds", d.lifetime_seconds);
    j.field("reason", d.reason);
    j.optional_number("exit_code", d.exit_code);
    j.optional_number("signal", d.signal);
    j.optional_number("rss_bytes", d.rss_bytes);
    j.optional_string("memory_cgroup", d.memory_cgroup);
    j.optional_number("memory_cgroup_usage_bytes", d.memory_cgroup_usage_bytes);
    j.optional_number("memory_cgroup_limit_bytes", d.memory_cgroup_limit_bytes);
    j.close('}');
  }
  j.close(']');
  j.close('}');
  j.out += '\n';
  return j.out;
}

}  // namespace gym::exporter
