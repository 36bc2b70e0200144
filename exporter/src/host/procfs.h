// procfs: parsers as pure functions from file text to values, and a process
// table read in one pass over <proc root>/*/stat, or walked from some
// processes down through their children. The proc root is a parameter
// (containers, fixture trees in tests).
//
// Thread-safety: parsers are pure; a ProcessTable belongs to one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "host/kept_files.h"

namespace gym::exporter::procfs {

struct ProcStat {
  pid_t pid = 0;
  std::string comm;
  char state = '?';
  pid_t ppid = 0;
  uint64_t flags = 0;
  uint64_t utime_ticks = 0;   // field 14
  uint64_t stime_ticks = 0;   // field 15
  uint64_t cutime_ticks = 0;  // field 16: reaped children's user time
  uint64_t cstime_ticks = 0;  // field 17: reaped children's system time
  uint64_t num_threads = 0;   // field 20
  uint64_t start_ticks = 0;   // field 22
  uint64_t vsize_bytes = 0;   // field 23
  uint64_t rss_pages = 0;     // field 24
  bool kernel_thread() const { return (flags & 0x00200000) != 0; }  // PF_KTHREAD
  bool zombie() const { return state == 'Z' || state == 'X'; }
  bool exiting() const { return zombie() || (flags & 0x00000004) != 0; }  // PF_EXITING
};

// /proc/<pid>/stat, split by the library's gym/proc_stat.h (the one stat
// parser of the project).
std::optional<ProcStat> parse_stat(std::string_view text);

// The btime line of /proc/stat: boot time in seconds since the epoch.
std::optional<uint64_t> parse_btime(std::string_view text);

struct MemInfo {
  std::optional<uint64_t> total;      // bytes
  std::optional<uint64_t> available;  // bytes
};
// /proc/meminfo. Tolerates unknown keys, blank lines and no space after the
// colon. Without MemAvailable (kernels before 3.14) available is
// MemFree + Buffers + Cached, as free(1) computed it then.
MemInfo parse_meminfo(std::string_view text);

// /proc/<pid>/smaps_rollup, in bytes: one read gives RSS, PSS, USS and swap
// of the same instant (so PSS never exceeds the RSS beside it). USS is
// Private_Clean + Private_Dirty.
struct SmapsRollup {
  std::optional<uint64_t> rss;
  std::optional<uint64_t> pss;  // the one a sample needs
  uint64_t uss = 0;
  uint64_t swap = 0;
};
SmapsRollup parse_smaps_rollup(std::string_view text);

// /proc/<pid>/status, in bytes: the resident memory by kind, which the
// kernel reads from the process's counters without its memory lock (unlike
// smaps_rollup). Each is empty when its line is missing.
struct StatusMemory {
  std::optional<uint64_t> rss;    // VmRSS: anon + file + shmem
  std::optional<uint64_t> anon;   // RssAnon
  std::optional<uint64_t> file;   // RssFile
  std::optional<uint64_t> shmem;  // RssShmem
};
StatusMemory parse_status_memory(std::string_view text);

enum class ReadStatus { kOk, kGone, kPermission, kError };
// Reads a small file whole (procfs, pidfiles, configuration files; at most
// about a megabyte). kGone: the process (or file) is no more.
ReadStatus read_file(const std::string& path, std::string& out);
// Writes `text` as the file at `path` whole, through path.new (the
// library's gym/whole_file.h, the one atomic-file writer: of `mode`, not
// through a link; with `sync`, flushed to its device first). False with
// `why`.
bool write_file_whole(const std::string& path, std::string_view text, std::string& why,
                      mode_t mode = 0600, bool sync = false);

// The boot time of <proc_root> (btime of its stat) in seconds since the
// epoch; empty when it cannot be read. The one place that reads it; the
// servers unit keeps it for the per-server collectors (ServersView::
// boot_seconds): it does not change while the host runs.
std::optional<uint64_t> read_boot_time(const std::string& proc_root);
// <proc_root>/sys/kernel/random/boot_id, this boot's id as its text ("" when
// unreadable or not one).
std::string read_boot_id(const std::string& proc_root);
// When a process started, in seconds since the epoch: the boot plus its
// start time in clock ticks (field 22 of its stat).
double started_unix_seconds(uint64_t boot_time, uint64_t start_ticks);
// Clock ticks a second (sysconf(_SC_CLK_TCK)).
double ticks_per_second();

// Open <proc root>/<pid>/stat descriptors kept from one scan to the next: a
// read through a kept one costs no path lookup, open or close (most of a
// scan's cost). Once its process is reaped the read fails (ESRCH), so a pid
// reused by another process is never read through an old descriptor. At most
// max_kept() are kept by all the StatFiles of the process together (a share
// of RLIMIT_NOFILE); beyond, files are opened and closed at each read. One
// StatFiles belongs to one thread.
class StatFiles {
 public:
  StatFiles();
  StatFiles(const StatFiles&) = delete;
  StatFiles& operator=(const StatFiles&) = delete;
  // The stat text of `pid` under `root`.
  ReadStatus read(const std::string& root, pid_t pid, std::string& out);
  // Closes the descriptors of processes not read since the last sweep.
  void sweep() { fds_.sweep(); }
  size_t kept() const { return fds_.size(); }
  size_t max_kept() const { return max_kept_; }

 private:
  struct Kept {
    int fd = -1;
    bool read = false;
    void close();
  };
  KeptFiles<Kept> fds_;
  size_t max_kept_ = 0;
};

// /proc/<pid>/statm: the fields a walk needs, in pages.
struct Statm {
  uint64_t size_pages = 0;      // field 1: 0 for a zombie (its memory is gone)
  uint64_t resident_pages = 0;  // field 2: what stat's rss reads
};
std::optional<Statm> parse_statm(std::string_view text);

// Pids of /proc/<pid>/task/<tid>/children ("12 34 ").
std::optional<std::vector<pid_t>> parse_children(std::string_view text);

// Descriptors kept, per process, for walking trees from their roots
// (ProcessTable::walk) instead of reading every process of the host: its
// task/<pid>/children, its task directory (whose link count is 2 plus its
// threads), and its stat (Detail::kStat: every field, read at every walk)
// or its statm (Detail::kStatm: RSS only, a fifth of stat's cost; the other
// fields are the process's at first sight, which is what a walk for memory
// needs). All are opened under one /proc/<pid> directory, so they are one
// process's; once it is reaped a read of its stat or statm fails (ESRCH) and
// they are dropped, so a pid reused by another process is read afresh. They
// count against the budget of StatFiles (three descriptors a process).
// One TreeFiles belongs to one thread.
class TreeFiles {
 public:
  enum class Detail { kStat, kStatm };
  explicit TreeFiles(Detail detail);
  TreeFiles(const TreeFiles&) = delete;
  TreeFiles& operator=(const TreeFiles&) = delete;
  Detail detail() const { return detail_; }
  size_t kept() const { return files_.size(); }

  enum class Read { kOk, kGone, kUnsupported, kError };
  // The process `pid` under `root` and, when `children` is not null, its
  // children (of every thread). kGone: no such process (or not readable).
  // kUnsupported: the kernel has no children files (CONFIG_PROC_CHILDREN),
  // or `root` is not a proc root that has them (a fixture tree); known from
  // then on. kError: its files could not be opened now (no descriptor left).
  Read read(const std::string& root, pid_t pid, ProcStat& out, std::vector<pid_t>* children);
  // Closes the descriptors of processes not read since the last sweep.
  void sweep() { files_.sweep(); }

 private:
  struct Entry {
    int value = -1;     // stat or statm
    int children = -1;  // task/<pid>/children
    int task = -1;      // task/
    ProcStat first;     // stat at first sight
    bool kept = false;  // counted in the budget
    bool read = false;
    void close();
  };
  std::optional<Entry> open(const std::string& root, pid_t pid, Read& why);
  Read read_entry(pid_t pid, Entry& e, ProcStat& out, std::vector<pid_t>* children);
  Detail detail_;
  size_t kept_budget_;
  bool unsupported_ = false;  // known for the root of files_
  KeptFiles<Entry> files_;
  std::string text_;
};

// Every process (not thread) under the proc root, read in one pass, with
// the parent map; children are linked only when they are not older than
// their parent (a parent pid reused by a younger process is not a parent).
// Or, by walk(), only some processes and their descendants.
class ProcessTable {
 public:
  explicit ProcessTable(std::string proc_root) : root_(std::move(proc_root)) {}
  // Reads the table afresh; false when the proc root cannot be listed.
  // With `files`, through its kept descriptors.
  bool scan(StatFiles* files = nullptr);
  // Reads afresh just the processes `roots` and, with `descend`, all their
  // descendants, found through the kernel's children files (the children of
  // each thread): on a host with many other processes, far less than a
  // scan. Pids of `roots` that are no process are skipped. False (and an
  // empty table) when the kernel or the proc root has no children files, or
  // a process's files could not be opened (no descriptor left): then scan. A process that exits
  // while its parent's children are read may hide a sibling from that walk (the kernel's list is
  // walked by position then), as a scan misses a process born behind its listing.
  bool walk(const std::vector<pid_t>& roots, TreeFiles& files, bool descend = true);
  // The per-server collectors' read: a walk from `roots` when there are
  // roots to walk from (nullopt: a match target needs every process) and
  // the walk can be made, else a scan. False when the scan could not list
  // the proc root.
  bool walk_or_scan(const std::optional<std::vector<pid_t>>& roots, TreeFiles& walk_files,
                    StatFiles& scan_files, bool descend = true);
  const ProcStat* find(pid_t pid) const;
  // The process `pid` if it is the one that started at `start_ticks`.
  const ProcStat* find(pid_t pid, uint64_t start_ticks) const;
  // The root and all its descendants, each once.
  std::vector<const ProcStat*> tree(const ProcStat& root) const;
  // The roots (processes of this table) and all their descendants, each once.
  std::vector<const ProcStat*> tree(const std::vector<const ProcStat*>& roots) const;
  const std::vector<ProcStat>& processes() const { return processes_; }
  const std::string& proc_root() const { return root_; }

 private:
  std::string root_;
  std::vector<ProcStat> processes_;
  std::unordered_map<pid_t, size_t> index_;
  std::unordered_map<pid_t, std::vector<size_t>> children_;
};

// What a tree uses: its live processes (kernel threads and zombies add
// nothing), their summed RSS, and each as (pid, start ticks), sorted.
struct TreeUsage {
  std::vector<const ProcStat*> live;
  std::vector<std::pair<pid_t, uint64_t>> members;
  uint64_t rss_bytes = 0;
  uint64_t threads = 0;
};

// Entries of <proc root>/<pid>/fd; nullopt when it cannot be listed (gone,
// or another user's process).
std::optional<uint64_t> count_open_fds(const std::string& proc_root, pid_t pid);
TreeUsage tree_usage(const ProcessTable& table, const ProcStat& root);
TreeUsage tree_usage(const ProcessTable& table, const std::vector<const ProcStat*>& roots);

}  // namespace gym::exporter::procfs
