// Fuzz target: the procfs parsers (stat, meminfo, smaps_rollup) and the
// cgroup parsers (mountinfo, a process's cgroups, pressure, cpu.max,
// key-value counts) on arbitrary bytes.
#include <cstdint>
#include <optional>
#include <string_view>

#include "cgroup.h"
#include "procfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto st = gym::exporter::procfs::parse_stat(text)) {
    if (st->pid <= 0) __builtin_trap();
  }
  (void)gym::exporter::procfs::parse_meminfo(text);
  (void)gym::exporter::procfs::parse_smaps_rollup(text);
  namespace cg = gym::exporter::cgroup;
  (void)cg::parse_mountinfo(text);
  const cg::Membership who = cg::parse_membership(text);
  for (const auto& path : {who.v2, who.v1_memory, who.v1_cpu})
    if (path && (path->empty() || path->front() != '/')) __builtin_trap();
  const cg::PressureFile p = cg::parse_pressure(text);
  for (const auto& one : {p.some, p.full})
    if (one && !(one->avg10 >= 0 && one->avg10 <= 100 && one->avg60 >= 0 && one->avg60 <= 100 &&
                 one->avg300 >= 0 && one->avg300 <= 100))
      __builtin_trap();
  if (const std::optional<double> cores = cg::parse_cpu_max(text))
    if (!(*cores >= 0)) __builtin_trap();  // a quota over a period: never negative or NaN
  (void)cg::find_count(text, "oom_kill");
  return 0;
}
