#include "host/pid_namespaces.h"

#include <sys/stat.h>

#include <charconv>
#include <set>

#include "host/lines.h"

namespace gym::exporter {

std::optional<pid_t> parse_innermost_nspid(std::string_view status) {
  static constexpr std::string_view kKey = "NSpid:";
  std::optional<pid_t> last;
  bool valid = false;
  for_each_line(status, [&](std::string_view line) {
    if (!line.starts_with(kKey)) return true;
    valid = true;
    for (std::string_view word : words(line.substr(kKey.size()))) {
      pid_t pid = 0;
      auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), pid);
      if (ec != std::errc() || ptr != word.data() + word.size() || pid <= 0) valid = false;
      last = pid;
    }
    return false;
  });
  return valid ? last : std::nullopt;
}

namespace {
uint64_t ns_inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_ino) : 0;
}
}  // namespace

PidNamespaces::PidNamespaces(std::string proc_root) : root_(std::move(proc_root)) {}

uint64_t PidNamespaces::own() {
  if (!own_) {
    // `self` exists only in a proc root of a namespace this process is in;
    // pid 1 of any proc root is in its namespace.
    uint64_t ns = ns_inode(root_ + "/self/ns/pid");
    if (ns == 0) ns = ns_inode(root_ + "/1/ns/pid");
    if (ns == 0) ns = ns_inode("/proc/self/ns/pid");
    own_ = ns;
  }
  return *own_;
}

void PidNamespaces::update(const std::vector<Key>& keys) {
  const std::set<Key> wanted(keys.begin(), keys.end());
  std::erase_if(found_, [&](const auto& kv) { return !wanted.contains(kv.first); });
  std::map<uint64_t, std::vector<Key>> by_start;  // the keys new to us, by start time
  for (const Key& k : wanted)
    if (!found_.contains(k)) by_start[k.start_ticks].push_back(k);
  if (by_start.empty()) return;
  ++scans_;
  for (const auto& [start, ks] : by_start)
    for (const Key& k : ks) found_[k] = std::nullopt;
  procfs::ProcessTable table(root_);
  if (!table.scan(&stat_files_)) return;
  stat_files_.sweep();
  std::string status;
  for (const procfs::ProcStat& p : table.processes()) {
    auto it = by_start.find(p.start_ticks);
    if (it == by_start.end() || p.kernel_thread()) continue;
    const std::string dir = root_ + "/" + std::to_string(p.pid);
    const uint64_t ns = ns_inode(dir + "/ns/pid");
    if (ns == 0) continue;
    std::optional<pid_t> inner;
    for (const Key& k : it->second) {
      if (k.ns != ns) continue;
      if (!inner) {
        if (procfs::read_file(dir + "/status", status) != procfs::ReadStatus::kOk) break;
        inner = parse_innermost_nspid(status);
        if (!inner) break;
      }
      if (*inner == k.pid) found_[k] = p.pid;
    }
  }
}

std::optional<pid_t> PidNamespaces::host_pid(const Key& key) const {
  auto it = found_.find(key);
  return it == found_.end() ? std::nullopt : it->second;
}

}  // namespace gym::exporter
