// The standard process_* metrics of the exporter's own process, from
// <proc root>/self (procfs.h parses them).
#include <dirent.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "collector.h"
#include "contract/families.h"
#include "host/procfs.h"

namespace gym::exporter {
namespace {

// The descriptors open, from `dir` (<proc>/self/fd). Linux 6.2 and later
// give their count as the size of that directory on procfs: one stat, where
// a listing reads an entry a descriptor (1,000 segments: about a millisecond
// a scrape, a tenth of one). Before, or off procfs, it is listed.
std::optional<double> open_fds(const std::string& dir) {
  struct statfs fs {};
  struct stat st {};
  if (::statfs(dir.c_str(), &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC &&
      ::stat(dir.c_str(), &st) == 0 && st.st_size > 0)
    return double(st.st_size);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return std::nullopt;
  int n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n - 1;  // less the one reading the directory
}

class ProcessCollector : public Collector {
 public:
  // The boot time is read once: it never changes while the host runs.
  explicit ProcessCollector(std::string proc_root)
      : proc_(std::move(proc_root)), boot_(procfs::read_boot_time(proc_)) {}

  void collect(const Emit& emit) override {
    Families out;
    std::string text;
    std::optional<procfs::ProcStat> st;
    if (procfs::read_file(proc_ + "/self/stat", text) == procfs::ReadStatus::kOk)
      st = procfs::parse_stat(text);
    double started = 0;  // the process's start: its CPU counts from then
    if (st) {
      const double ticks = procfs::ticks_per_second();
      const double page = double(::sysconf(_SC_PAGESIZE));
      add_simple(out, "process_cpu_seconds_total",
                 double(st->utime_ticks + st->stime_ticks) / ticks);
      add_simple(out, "process_virtual_memory_bytes", double(st->vsize_bytes));
      add_simple(out, "process_resident_memory_bytes", double(st->rss_pages) * page);
      if (boot_) {
        started = procfs::started_unix_seconds(*boot_, st->start_ticks);
        add_simple(out, "process_start_time_seconds", started);
      }
    }
    if (const std::optional<double> fds = open_fds(proc_ + "/self/fd"))
      add_simple(out, "process_open_fds", *fds);
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0)
      add_simple(out, "process_max_fds", double(lim.rlim_cur));
    for (const auto& f : out) emit_since(emit, f, started);
  }

 private:
  std::string proc_;
  const std::optional<uint64_t> boot_;  // the host's boot time
};

GYM_REGISTER_COLLECTOR({.name = "process",
                        .order = 100,
                        .parse = nullptr,
                        .make = [](const CollectorSettings*, const CollectorContext&) {
                          return std::make_unique<ProcessCollector>("/proc");
                        }});

}  // namespace
}  // namespace gym::exporter
