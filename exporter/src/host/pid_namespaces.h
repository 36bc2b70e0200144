// Pid namespaces: a writer in a container records its pid as its own pid
// namespace sees it (segment Header::owner_pid_ns). The exporter finds the
// same process in its proc root: the process whose innermost pid namespace is
// the writer's, whose NSpid ends in the writer's pid, and whose start time is
// the writer's (start time is the same in every namespace).
//
// Finding one costs a scan of the proc root (every process's stat, then the
// namespace and status of the few that started at the same tick), made at
// most once for each new writer: every writer not seen before is looked up
// in the same scan, and the answer, found or not, is kept while the writer
// is listed.
//
// Thread-safety: one PidNamespaces belongs to one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "host/procfs.h"

namespace gym::exporter {

// The last pid of the NSpid line of /proc/<pid>/status (the pid in the
// process's innermost namespace); nullopt without one (Linux before 4.1).
std::optional<pid_t> parse_innermost_nspid(std::string_view status);

class PidNamespaces {
 public:
  explicit PidNamespaces(std::string proc_root);
  const std::string& proc_root() const { return root_; }

  // A process as a writer recorded it.
  struct Key {
    uint64_t ns = 0;
    pid_t pid = 0;
    uint64_t start_ticks = 0;
    auto operator<=>(const Key&) const = default;
  };
  // The pid namespace of the proc root (of its `self`, else of its pid 1,
  // else this process's); 0 when it cannot be read.
  uint64_t own();
  // Whether `ns` is the proc root's namespace (0, not recorded, counts as it).
  bool is_own(uint64_t ns) { return ns == 0 || ns == own(); }
  // Looks up every key not looked up before (in one scan), and forgets the
  // keys not given (writers that are gone).
  void update(const std::vector<Key>& keys);
  // The pid of `key` in the proc root; nullopt: not visible from here (or not
  // looked up yet).
  std::optional<pid_t> host_pid(const Key& key) const;
  // Scans made so far (for tests and the benchmark).
  uint64_t scans() const { return scans_; }

 private:
  std::string root_;
  std::optional<uint64_t> own_;
  std::map<Key, std::optional<pid_t>> found_;
  procfs::StatFiles stat_files_;
  uint64_t scans_ = 0;
};

}  // namespace gym::exporter
