// Fuzz target: the procfs parsers (stat, meminfo, smaps_rollup) on
// arbitrary bytes.
#include <cstdint>
#include <string_view>

#include "procfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto st = gym::exporter::procfs::parse_stat(text)) {
    if (st->pid <= 0) __builtin_trap();
  }
  (void)gym::exporter::procfs::parse_meminfo(text);
  (void)gym::exporter::procfs::parse_smaps_rollup(text);
  return 0;
}
