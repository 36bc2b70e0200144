// A segment as the registry reader holds it: its mapping, its layout and
// owner from the header (validated once), and its records as entries.
#pragma once

#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gym/segment_format.h"

namespace gym::reader_internal {

struct Segment {
  std::string name;
  ino_t ino = 0;
  int fd = -1;
  const unsigned char* base = nullptr;
  uint64_t size = 0;
  uint32_t version = 0;
  uint32_t max_records = 0;
  uint32_t value_lines = 0;
  uint32_t record_bytes = 0;  // 32 from version 7, 1024 before
  uint64_t records_offset = 0;
  uint64_t strings_offset = 0;  // version 7
  uint32_t string_bytes = 0;    // version 7
  uint64_t values_offset = 0;
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  uint64_t pid_ns = 0;     // the owner's pid namespace (0: not recorded)
  int64_t created_ns = 0;  // the header's created_unix_ns: when its counting began
  uint8_t boot_id[16] = {};
  uint64_t dropped = 0;  // the header's dropped_series, last read
  uint32_t parsed = 0;   // records [0, parsed) examined
  // The valid records, with their validated metadata: nothing is read from
  // shared memory twice to decide where a value lives.
  struct Entry {
    uint32_t record;
    uint32_t id;
    uint32_t value_line;
    segment::SeriesKind kind;
    uint8_t shards;
    uint8_t bound_count;
    uint16_t native_words;
    uint32_t scratch;  // first word in the copied values
    uint32_t last;     // first word in `last`
  };
  std::vector<Entry> entries;
  uint32_t scratch_words = 0;
  // Counters and histograms as last read (histograms: the shards' buckets,
  // then the sum), to see a reset and to fold what was seen on damage.
  std::vector<uint64_t> last;
  bool listed = false;
  bool damaged = false;
  bool dead = false;  // read only: owner gone, left for the retiring reader

  const segment::Header* header() const { return reinterpret_cast<const segment::Header*>(base); }
  // Its layout and its owner, from its header (validated).
  void take_layout(const segment::Header& h) {
    version = h.format_version;
    max_records = h.max_records;
    value_lines = h.value_lines;
    record_bytes = h.record_bytes;
    records_offset = h.records_offset;
    strings_offset = h.strings_offset;
    string_bytes = h.string_bytes;
    values_offset = h.values_offset;
  }
  void take_owner(const segment::Header& h) {
    pid = h.owner_pid;
    start_ticks = h.owner_start_ticks;
    pid_ns = h.owner_pid_ns;
    created_ns = h.created_unix_ns > uint64_t(INT64_MAX) ? 0 : int64_t(h.created_unix_ns);
    std::memcpy(boot_id, h.owner_boot_id, sizeof boot_id);
  }
  // Record i's head: its state and exemplar_line are read from the
  // mapping (they change); a Record's first bytes in every version.
  const segment::RecordHead* record(uint32_t i) const {
    return reinterpret_cast<const segment::RecordHead*>(base + records_offset +
                                                        uint64_t{i} * record_bytes);
  }
  const uint64_t* line(uint32_t l) const {
    return reinterpret_cast<const uint64_t*>(base + values_offset +
                                             uint64_t{l} * segment::kLineBytes);
  }
  ~Segment() {
    if (base != nullptr) ::munmap(const_cast<unsigned char*>(base), size);
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace gym::reader_internal
