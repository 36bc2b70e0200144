#include "host/cgroup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <vector>

#include "host/lines.h"
#include "host/procfs.h"

namespace gym::exporter::cgroup {

namespace {

std::optional<uint64_t> to_u64(std::string_view s) {
  uint64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(char((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool has_option(std::string_view options, std::string_view want) {
  size_t pos = 0;
  while (pos <= options.size()) {
    size_t end = options.find(',', pos);
    if (end == std::string_view::npos) end = options.size();
    if (options.substr(pos, end - pos) == want) return true;
    pos = end + 1;
  }
  return false;
}

// A number file ("123\n"); nullopt for a word (v2's "max": no limit).
std::optional<uint64_t> read_number(const std::string& path, std::string& buf) {
  if (procfs::read_file(path, buf) != procfs::ReadStatus::kOk) return std::nullopt;
  return to_u64(trim(buf));
}

// Under `mount` (whose hierarchy part is `root`), the directory of `path`.
std::optional<std::string> dir_of(const std::string& mount, const std::string& root,
                                  const std::string& path) {
  if (mount.empty() || path.empty() || path.front() != '/') return std::nullopt;
  if (root == "/") return path == "/" ? mount : mount + path;
  if (path == root) return mount;
  if (path.starts_with(root) && path[root.size()] == '/') return mount + path.substr(root.size());
  return std::nullopt;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The v2 cgroup of `who` when its directory has `v2_file` (the controller
// is enabled there), else its v1 path in the hierarchy at `v1_mount`.
std::optional<Place> locate_in(const Mounts& mounts, const Membership& who, const char* v2_file,
                               const std::string& v1_mount, const std::string& v1_root,
                               const std::optional<std::string>& v1_path) {
  if (who.v2) {
    if (std::optional<std::string> dir = dir_of(mounts.v2, mounts.v2_root, *who.v2))
      if (::access((*dir + v2_file).c_str(), F_OK) == 0) return Place{2, *who.v2, *dir};
  }
  if (v1_path) {
    if (std::optional<std::string> dir = dir_of(v1_mount, v1_root, *v1_path))
      return Place{1, *v1_path, *dir};
  }
  return std::nullopt;
}

}  // namespace

Mounts parse_mountinfo(std::string_view text) {
  Mounts m;
  for_each_line(text, [&](std::string_view line) {
    const std::vector<std::string_view> w = words(line);
    size_t dash = 0;
    for (size_t i = 6; i < w.size(); ++i)
      if (w[i] == "-") {
        dash = i;
        break;
      }
    if (dash == 0 || dash + 3 > w.size()) return;
    const std::string_view fstype = w[dash + 1];
    const std::string_view super = dash + 3 < w.size() ? w[dash + 3] : std::string_view();
    if (fstype == "cgroup2" && m.v2.empty()) {
      m.v2 = unescape(w[4]);
      m.v2_root = unescape(w[3]);
    } else if (fstype == "cgroup" && m.v1_memory.empty() && has_option(super, "memory")) {
      m.v1_memory = unescape(w[4]);
      m.v1_memory_root = unescape(w[3]);
    } else if (fstype == "cgroup" && m.v1_cpu.empty() && has_option(super, "cpu")) {
      m.v1_cpu = unescape(w[4]);
      m.v1_cpu_root = unescape(w[3]);
    }
  });
  return m;
}

Membership parse_membership(std::string_view text) {
  Membership who;
  for_each_line(text, [&](std::string_view line) {
    const size_t a = line.find(':');
    if (a == std::string_view::npos) return;
    const size_t b = line.find(':', a + 1);
    if (b == std::string_view::npos) return;
    const std::string_view id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    const std::string path(line.substr(b + 1));
    if (path.empty() || path.front() != '/') return;
    if (id == "0" && controllers.empty())
      who.v2 = path;
    else if (has_option(controllers, "memory"))
      who.v1_memory = path;
    else if (has_option(controllers, "cpu"))
      who.v1_cpu = path;
  });
  return who;
}

std::optional<Place> locate(const Mounts& mounts, const Membership& who) {
  return locate_in(mounts, who, "/memory.current", mounts.v1_memory, mounts.v1_memory_root,
                   who.v1_memory);
}

std::optional<Place> locate_cpu(const Mounts& mounts, const Membership& who) {
  return locate_in(mounts, who, "/cpu.max", mounts.v1_cpu, mounts.v1_cpu_root, who.v1_cpu);
}

PressureFile parse_pressure(std::string_view text) {
  PressureFile f;
  for_each_line(text, [&](std::string_view line) {
    const std::vector<std::string_view> w = words(line);
    if (w.empty() || (w[0] != "some" && w[0] != "full")) return;
    Pressure p;
    int seen = 0;
    for (size_t i = 1; i < w.size(); ++i) {
      const size_t eq = w[i].find('=');
      if (eq == std::string_view::npos) continue;
      const std::string_view key = w[i].substr(0, eq), value = w[i].substr(eq + 1);
      if (key == "total") {
        if (std::optional<uint64_t> v = to_u64(value)) {
          p.total_us = *v;
          seen |= 8;
        }
        continue;
      }
      double d = 0;
      auto r = std::from_chars(value.data(), value.data() + value.size(), d);
      if (r.ec != std::errc() || r.ptr != value.data() + value.size() || !(d >= 0 && d <= 100))
        continue;
      if (key == "avg10") p.avg10 = d, seen |= 1;
      if (key == "avg60") p.avg60 = d, seen |= 2;
      if (key == "avg300") p.avg300 = d, seen |= 4;
    }
    if (seen != 15) return;  // all four, or the line is not one we know
    (w[0] == "some" ? f.some : f.full) = p;
  });
  return f;
}

PressureFile read_pressure(const std::string& path) {
  std::string buf;
  if (procfs::read_file(path, buf) != procfs::ReadStatus::kOk) return {};
  return parse_pressure(buf);
}

std::optional<uint64_t> find_count(std::string_view text, std::string_view key) {
  std::optional<uint64_t> out;
  for_each_line(text, [&](std::string_view line) {
    if (out) return;
    const std::vector<std::string_view> w = words(line);
    if (w.size() == 2 && w[0] == key) out = to_u64(w[1]);
  });
  return out;
}

MemoryState read_memory(const Place& place) {
  MemoryState s;
  s.exists = is_dir(place.dir);
  if (!s.exists) return s;
  std::string buf;
  const std::string& d = place.dir;
  if (place.version == 2) {
    s.current = read_number(d + "/memory.current", buf);
    s.peak = read_number(d + "/memory.peak", buf);
    s.limit = read_number(d + "/memory.max", buf);  // "max": none
    s.pressure = read_pressure(d + "/memory.pressure");
    if (procfs::read_file(d + "/memory.events", buf) == procfs::ReadStatus::kOk) {
      s.oom_kills = find_count(buf, "oom_kill");
      s.oom_group_kills = find_count(buf, "oom_group_kill");
    }
  } else {
    s.current = read_number(d + "/memory.usage_in_bytes", buf);
    s.peak = read_number(d + "/memory.max_usage_in_bytes", buf);
    s.limit = read_number(d + "/memory.limit_in_bytes", buf);
    if (s.limit && *s.limit >= kV1Unlimited) s.limit.reset();
    s.oom_kills = read_oom_kills(place);
  }
  return s;
}

std::optional<double> parse_cpu_max(std::string_view text) {
  const std::vector<std::string_view> w = words(trim(text));
  if (w.size() != 2) return std::nullopt;
  const std::optional<uint64_t> quota = to_u64(w[0]), period = to_u64(w[1]);
  if (!quota || !period || *period == 0) return std::nullopt;  // "max": none
  return double(*quota) / double(*period);
}

CpuState read_cpu(const Place& place) {
  CpuState s;
  s.exists = is_dir(place.dir);
  if (!s.exists) return s;
  std::string buf;
  const std::string& d = place.dir;
  if (place.version == 2) {
    if (procfs::read_file(d + "/cpu.max", buf) == procfs::ReadStatus::kOk)
      s.limit_cores = parse_cpu_max(buf);
  } else {
    // cfs_quota_us is -1 (no limit), which read_number does not take.
    const std::optional<uint64_t> quota = read_number(d + "/cpu.cfs_quota_us", buf);
    const std::optional<uint64_t> period = read_number(d + "/cpu.cfs_period_us", buf);
    if (quota && period && *period != 0) s.limit_cores = double(*quota) / double(*period);
  }
  if (procfs::read_file(d + "/cpu.stat", buf) == procfs::ReadStatus::kOk) {
    s.periods = find_count(buf, "nr_periods");
    s.throttled_periods = find_count(buf, "nr_throttled");
    if (place.version == 2) {
      s.throttled_us = find_count(buf, "throttled_usec");
    } else if (std::optional<uint64_t> ns = find_count(buf, "throttled_time")) {
      s.throttled_us = *ns / 1000;
    }
  }
  return s;
}

std::optional<uint64_t> read_oom_kills(const Place& place) {
  std::string buf;
  const std::string file = place.version == 2 ? "/memory.events" : "/memory.oom_control";
  if (procfs::read_file(place.dir + file, buf) != procfs::ReadStatus::kOk) return std::nullopt;
  return find_count(buf, "oom_kill");
}

Resolver::Resolver(std::string proc_root, std::optional<Mounts> mounts)
    : proc_root_(std::move(proc_root)), mounts_(std::move(mounts)) {}

void Resolver::init() {
  if (init_) return;
  init_ = true;
  std::string buf;
  if (!mounts_) {
    mounts_.emplace();
    if (procfs::read_file(proc_root_ + "/self/mountinfo", buf) == procfs::ReadStatus::kOk)
      *mounts_ = parse_mountinfo(buf);
  }
  if (procfs::read_file(proc_root_ + "/self/cgroup", buf) == procfs::ReadStatus::kOk) {
    const Membership self = parse_membership(buf);
    self_ = locate(*mounts_, self);
    self_cpu_ = locate_cpu(*mounts_, self);
  }
}

std::optional<Membership> Resolver::membership(pid_t pid) {
  init();
  std::string buf;
  if (procfs::read_file(proc_root_ + "/" + std::to_string(pid) + "/cgroup", buf) !=
      procfs::ReadStatus::kOk)
    return std::nullopt;
  return parse_membership(buf);
}

namespace {
// `place` unless it is the root of its hierarchy or `self`.
std::optional<Place> unless_shared(std::optional<Place> place, const std::optional<Place>& self) {
  if (!place || place->path == "/" || (self && *self == *place)) return std::nullopt;
  return place;
}
}  // namespace

std::optional<Place> Resolver::own(pid_t pid) {
  const std::optional<Membership> who = membership(pid);
  return who ? unless_shared(locate(*mounts_, *who), self_) : std::nullopt;
}

std::pair<std::optional<Place>, std::optional<Place>> Resolver::own_both(pid_t pid) {
  const std::optional<Membership> who = membership(pid);
  if (!who) return {};
  return {unless_shared(locate(*mounts_, *who), self_),
          unless_shared(locate_cpu(*mounts_, *who), self_cpu_)};
}

}  // namespace gym::exporter::cgroup
