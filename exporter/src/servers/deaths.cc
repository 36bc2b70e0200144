#include "servers/deaths.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace gym::exporter {

namespace {
bool plain(const std::string& s) {
  return !s.empty() && s.find_first_of("\t\n") == std::string::npos;
}

template <class T>
std::string or_dash(const std::optional<T>& v) {
  if (!v) return "-";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", double(*v));
  return buf;
}

// A record as a line of the counts file:
//   death <time> <pid> <parent> <lifetime> <reason> <code> <signal> <rss>
//         <memcg usage> <memcg limit> <type>\t<server>\t<command>\t<memcg>
// ("-" for what is not known); "" when a text field holds a tab or newline.
std::string encode_record(const ProcessDeath& d) {
  const auto text_ok = [](const std::string& t) {
    return t.find_first_of("\t\n") == std::string::npos;
  };
  if (!plain(d.server) || !plain(d.server_type) || !text_ok(d.command) ||
      !text_ok(d.memory_cgroup) || !plain(d.reason))
    return {};
  return "death " + or_dash(std::optional<double>(d.time)) + " " + std::to_string(d.pid) + " " +
         std::to_string(d.parent) + " " + or_dash(d.lifetime_seconds) + " " + d.reason + " " +
         or_dash(d.exit_code) + " " + or_dash(d.signal) + " " + or_dash(d.rss_bytes) + " " +
         or_dash(d.memory_cgroup_usage_bytes) + " " + or_dash(d.memory_cgroup_limit_bytes) + " " +
         d.server_type + "\t" + d.server + "\t" + d.command + "\t" + d.memory_cgroup + "\n";
}

// One number field of a record: "-" is none; false when it is neither.
template <class T>
bool field_of(const std::string& w, std::optional<T>& out) {
  if (w == "-") return true;
  char* end = nullptr;
  const double v = std::strtod(w.c_str(), &end);
  // Within T's range: a conversion from outside it is undefined.
  if (end == w.c_str() || *end != '\0' || !(v >= 0) || !(v < double(std::numeric_limits<T>::max())))
    return false;
  out = T(v);
  return true;
}

std::optional<ProcessDeath> decode_record(const std::string& line) {
  std::istringstream in(line);
  std::string tag, time, pid, parent, lifetime, reason, code, signal, rss, usage, limit;
  if (!(in >> tag >> time >> pid >> parent >> lifetime >> reason >> code >> signal >> rss >>
        usage >> limit) ||
      tag != "death")
    return std::nullopt;
  ProcessDeath d;
  std::optional<double> t;
  std::optional<int64_t> p, pp;
  if (!field_of(time, t) || !t || !field_of(pid, p) || !p || *p <= 0 || *p > INT32_MAX ||
      !field_of(parent, pp) || !pp || *pp > INT32_MAX || !field_of(lifetime, d.lifetime_seconds) ||
      !field_of(code, d.exit_code) || !field_of(signal, d.signal) || !field_of(rss, d.rss_bytes) ||
      !field_of(usage, d.memory_cgroup_usage_bytes) ||
      !field_of(limit, d.memory_cgroup_limit_bytes) ||
      std::find(kDeathReasons.begin(), kDeathReasons.end(), reason) == kDeathReasons.end())
    return std::nullopt;
  d.time = *t;
  d.pid = pid_t(*p);
  d.parent = pid_t(*pp);
  d.reason = reason;
  std::string rest;
  std::getline(in, rest);
  if (rest.empty() || rest[0] != ' ') return std::nullopt;
  std::vector<std::string> texts;
  size_t at = 1;
  for (size_t tab; (tab = rest.find('\t', at)) != std::string::npos; at = tab + 1)
    texts.push_back(rest.substr(at, tab - at));
  texts.push_back(rest.substr(at));
  if (texts.size() != 4 || texts[0].empty() || texts[1].empty()) return std::nullopt;
  d.server_type = texts[0];
  d.server = texts[1];
  d.command = texts[2];
  d.memory_cgroup = texts[3];
  return d;
}
}  // namespace

DeathLog::DeathLog(DeathLimits limits) : limits_(limits) {}

void DeathLog::start_counting(double unix_now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (since_ == 0) since_ = unix_now;
}

size_t DeathLog::server_index(const std::string& name, const std::string& type) {
  for (size_t i = 0; i < servers_.size(); ++i)
    if (servers_[i].server == name && servers_[i].server_type == type) return i;
  servers_.push_back({name, type, {}});
  return servers_.size() - 1;
}

void DeathLog::resync(const std::vector<DeathMember>& members, double taken) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<pid_t, Watched> next;
  for (const DeathMember& m : members) {
    Watched w;
    w.server = server_index(m.server, m.server_type);
    w.parent = m.parent;
    w.command = m.command;
    w.born = m.start_seconds;
    w.added = taken;
    w.rss_bytes = m.rss_bytes;
    if (auto it = watched_.find(m.pid); it != watched_.end() && it->second.server == w.server) {
      if (w.command.empty()) w.command = it->second.command;
      w.added = std::min(w.added, it->second.added);
    }
    next[m.pid] = std::move(w);
  }
  // Not in the sample: forked since it was taken (not in it yet), or gone
  // with its exit event still on its way (queued behind the sample's walk).
  // Dropped at its second miss: gone unseen (events lost, or before the log
  // began).
  for (auto& [pid, w] : watched_) {
    if (next.contains(pid)) continue;
    if (w.added <= taken && w.missed) continue;
    if (w.added <= taken) w.missed = true;
    next[pid] = std::move(w);
  }
  watched_ = std::move(next);
}

void DeathLog::on_event(const procev::ProcEvent& e, double now, double unix_now,
                        const std::function<std::string(pid_t)>& command) {
  using Kind = procev::ProcEvent::Kind;
  std::string name;
  if (e.kind == Kind::kExec) name = command(e.pid);  // outside the lock: a read of procfs
  std::lock_guard<std::mutex> lock(mu_);
  switch (e.kind) {
    case Kind::kFork: {
      auto parent = watched_.find(e.parent);
      if (parent == watched_.end()) {
        watched_.erase(e.pid);  // a pid reused by a process of no server
        return;
      }
      Watched child = parent->second;
      child.parent = e.parent;
      child.born = now;
      child.added = now;
      watched_[e.pid] = std::move(child);
      return;
    }
    case Kind::kExec:
      if (auto it = watched_.find(e.pid); it != watched_.end() && !name.empty())
        it->second.command = std::move(name);
      return;
    case Kind::kExit:
      if (auto it = watched_.find(e.pid); it != watched_.end()) {
        died(e.pid, it->second, e.status, now, unix_now);
        watched_.erase(it);
      }
      return;
  }
}

void DeathLog::died(pid_t pid, const Watched& w, uint32_t status, double now, double unix_now) {
  ProcessDeath d;
  d.time = unix_now;
  d.server = servers_[w.server].server;
  d.server_type = servers_[w.server].server_type;
  d.pid = pid;
  d.parent = w.parent;
  d.command = w.command;
  if (w.born > 0 && now >= w.born) d.lifetime_seconds = now - w.born;
  d.rss_bytes = w.rss_bytes;
  size_t reason = 2;  // signal
  if (WIFEXITED(status)) {
    d.exit_code = WEXITSTATUS(status);
    reason = *d.exit_code == 0 ? 0 : 1;
  } else {
    d.signal = WTERMSIG(status);
  }
  if (auto oom = ooms_.find(pid); oom != ooms_.end()) {
    if (d.signal == SIGKILL) {
      const kmsg::OomKill& k = oom->second.first;
      reason = 3;
      d.memory_cgroup = k.oom_memcg.empty() ? "/" : k.oom_memcg;
      d.memory_cgroup_usage_bytes = k.memcg_usage_bytes;
      d.memory_cgroup_limit_bytes = k.memcg_limit_bytes;
      if (k.anon_rss_bytes)
        d.rss_bytes =
            *k.anon_rss_bytes + k.file_rss_bytes.value_or(0) + k.shmem_rss_bytes.value_or(0);
    }
    ooms_.erase(oom);
  }
  d.reason = kDeathReasons[reason];
  ++servers_[w.server].exits[reason];
  ++version_;
  records_.push_back(std::move(d));
  while (records_.size() > limits_.records ||
         (!records_.empty() && records_.front().time < unix_now - limits_.max_age_seconds))
    records_.pop_front();
}

void DeathLog::set_limits(DeathLimits limits) {
  std::lock_guard<std::mutex> lock(mu_);
  limits_ = limits;
  while (records_.size() > limits_.records) records_.pop_front();
}

void DeathLog::on_oom(kmsg::OomKill kill, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(ooms_, [&](const auto& kv) { return kv.second.second < now - 60; });
  if (ooms_.size() >= 1024) ooms_.erase(ooms_.begin());
  const pid_t pid = kill.pid;
  ooms_[pid] = {std::move(kill), now};
}

std::vector<DeathLog::Count> DeathLog::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return servers_;
}

std::vector<ProcessDeath> DeathLog::records(const std::string& server, double since,
                                            const std::string& reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProcessDeath> out;
  for (const ProcessDeath& d : records_)
    if ((server.empty() || d.server == server) && d.time >= since &&
        (reason.empty() || d.reason == reason))
      out.push_back(d);
  return out;
}

double DeathLog::since() const {
  std::lock_guard<std::mutex> lock(mu_);
  return since_;
}

uint64_t DeathLog::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

std::string DeathLog::encode() const {
  std::lock_guard<std::mutex> lock(mu_);
  char since[40];
  std::snprintf(since, sizeof since, "%.17g", since_);
  std::string out = std::string("gym-exporter-deaths 1\nsince ") + since + "\n";
  for (const Count& c : servers_) {
    if (!plain(c.server) || !plain(c.server_type)) continue;
    out += "server";
    for (uint64_t n : c.exits) out += " " + std::to_string(n);
    out += " " + c.server_type + "\t" + c.server + "\n";
  }
  for (const ProcessDeath& d : records_) out += encode_record(d);
  return out;
}

bool DeathLog::restore(std::string_view text, std::string& why) {
  std::vector<Count> counts;
  std::deque<ProcessDeath> records;
  double since = 0;
  size_t at = 0, line_no = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string line(text.substr(at, end - at));
    at = end + 1;
    ++line_no;
    if (line_no == 1) {
      if (line != "gym-exporter-deaths 1") return why = "not a deaths file", false;
      continue;
    }
    if (line_no == 2) {
      if (std::sscanf(line.c_str(), "since %lf", &since) != 1 || !(since > 0))
        return why = "line 2 is not since <seconds>", false;
      continue;
    }
    if (line.starts_with("death ")) {
      std::optional<ProcessDeath> d = decode_record(line);
      if (!d) return why = "line " + std::to_string(line_no) + " is not a death's record", false;
      records.push_back(std::move(*d));
      continue;
    }
    Count c;
    int used = 0;
    unsigned long long n[4];
    if (std::sscanf(line.c_str(), "server %llu %llu %llu %llu %n", &n[0], &n[1], &n[2], &n[3],
                    &used) != 4 ||
        used == 0)
      return why = "line " + std::to_string(line_no) + " is not a server's counts", false;
    const std::string rest = line.substr(size_t(used));
    const size_t tab = rest.find('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 == rest.size())
      return why = "line " + std::to_string(line_no) + " names no server", false;
    c.server_type = rest.substr(0, tab);
    c.server = rest.substr(tab + 1);
    for (size_t i = 0; i < c.exits.size(); ++i) c.exits[i] = n[i];
    counts.push_back(std::move(c));
  }
  if (line_no < 2) return why = "too short", false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!servers_.empty()) return true;  // counting already: what it has goes on
  servers_ = std::move(counts);
  since_ = since;
  records_ = std::move(records);
  while (records_.size() > limits_.records) records_.pop_front();
  return true;
}

size_t DeathLog::watched() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watched_.size();
}

}  // namespace gym::exporter
