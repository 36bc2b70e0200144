// The cgroup collector's totals file: each server's counts of its removed
// cgroups and the last counts of the cgroups it has (collectors/cgroups.h),
// so that an exporter started again on the same boot goes on from them and
// its counters never fall. It lives in the registry directory, beside the
// registry's own totals; only the registry's lock holder writes it (a new
// file renamed over the old one). A text file, one line a server and one a
// cgroup:
//
//   gym-exporter-cgroup-totals 1 <boot id>
//   server <seen: 11 of 0|1> <11 gone counts> <server type>\t<server name>
//   cgroup <version> <memory 0|1> <cpu 0|1> <inode> <11 of: last|- total> <path>\t<dir>
//
// A server whose name or type holds a tab or a newline is not kept.
//
// Thread-safety: pure functions over their arguments and the file.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "collectors/cgroups.h"

namespace gym::exporter {

inline constexpr const char* kCgroupTotalsFile = ".exporter-cgroup-totals";
inline constexpr size_t kMaxCgroupTotalsBytes = size_t(16) << 20;

using CgroupTotals = std::map<std::string, CgroupCollector::ServerTotals>;

std::string encode_cgroup_totals(const CgroupTotals& totals, std::string_view boot_id);
// False, with `why`, when `text` is not such a file or is of another boot;
// then `out` is left as it was.
bool decode_cgroup_totals(std::string_view text, std::string_view boot_id, CgroupTotals& out,
                          std::string& why);

// The file at `path` into `out` (a missing file is fine and leaves it
// empty); `boot_id` is this boot's (procfs::read_boot_id).
bool load_cgroup_totals(const std::string& path, std::string_view boot_id, CgroupTotals& out,
                        std::string& why);
bool save_cgroup_totals(const std::string& path, std::string_view boot_id,
                        const CgroupTotals& totals, std::string& why);

}  // namespace gym::exporter
