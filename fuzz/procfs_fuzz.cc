// Fuzz target: the procfs parsers (stat, meminfo, smaps_rollup, status), the
// kernel's process events (a proc connector datagram) and OOM records (its
// log's lines), the deaths collector's counts file, and the
// cgroup parsers (mountinfo, a process's cgroups, pressure, cpu.max,
// key-value counts) and the cgroup collector's totals file on arbitrary
// bytes.
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "collectors/cgroup_totals.h"
#include "host/cgroup.h"
#include "host/kmsg.h"
#include "host/proc_events.h"
#include "host/procfs.h"
#include "servers/deaths.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto st = gym::exporter::procfs::parse_stat(text)) {
    if (st->pid <= 0) __builtin_trap();
  }
  (void)gym::exporter::procfs::parse_meminfo(text);
  (void)gym::exporter::procfs::parse_smaps_rollup(text);
  (void)gym::exporter::procfs::parse_status_memory(text);
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
  std::vector<gym::exporter::procev::ProcEvent> events;
  (void)gym::exporter::procev::parse_proc_events(text, events);
  for (const auto& e : events)
    if (e.pid <= 0) __builtin_trap();
  gym::exporter::kmsg::OomParser oom;
  std::string_view rest = text;
  while (!rest.empty()) {  // line by line, as records come
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    (void)gym::exporter::kmsg::record_message(line);
    if (auto k = oom.message(line))
      if (k->pid <= 0) __builtin_trap();
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  }
  // The deaths file: what it accepts it writes back, and reads again the same.
  {
    gym::exporter::DeathLog first;
    std::string why;
    if (first.restore(text, why)) {
      const std::string again = first.encode();
      gym::exporter::DeathLog second;
      if (!second.restore(again, why) || second.encode() != again) __builtin_trap();
    }
  }
  // The totals file: what it accepts it writes back the same, and reads again.
  gym::exporter::CgroupTotals totals;
  std::string why;
  if (gym::exporter::decode_cgroup_totals(text, "b", totals, why)) {
    const std::string again = gym::exporter::encode_cgroup_totals(totals, "b");
    gym::exporter::CgroupTotals second;
    if (!gym::exporter::decode_cgroup_totals(again, "b", second, why)) __builtin_trap();
    if (gym::exporter::encode_cgroup_totals(second, "b") != again) __builtin_trap();
  }
  return 0;
}
