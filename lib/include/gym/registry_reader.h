// RegistryReader: the only code that parses segments (see segment_format.h).
// Takes snapshots of every segment in a registry directory, sums series with
// the same family and labels across live segments, and retires the segments
// of owners that are gone: their counters and histograms are folded into
// totals the reader keeps (so they never go down), their gauges are dropped,
// and their files are removed.
//
// Thread-safety: none; one thread takes snapshots (the exporter serializes
// scrapes). A snapshot never blocks or waits for a writer.
//
// One reader per registry directory: a second one would miss the totals of
// the segments the first retires.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gym/segment_format.h"

namespace gym {

// What a series is: immutable once the reader has seen it.
struct SeriesInfo {
  segment::SeriesKind kind;
  std::string family;
  std::vector<std::pair<std::string, std::string>> labels;  // sorted by name
  std::vector<int64_t> bounds;                              // raw, histograms only
  double unit_divisor = 1.0;                                // exposed value = raw / unit_divisor
};

struct SeriesSample {
  const SeriesInfo* info = nullptr;
  uint64_t counter = 0;  // counters
  int64_t gauge = 0;     // gauges
  // Histograms: cumulative counts per bound, then +Inf (which is the count).
  std::vector<uint64_t> cumulative_buckets;
  int64_t sum = 0;  // histograms, raw units
  uint64_t count() const { return cumulative_buckets.empty() ? 0 : cumulative_buckets.back(); }
};

struct RegistryStats {
  uint64_t live_segments = 0;           // live writer segments in this snapshot
  uint64_t retired_segments_total = 0;  // owners gone, folded in and removed
  uint64_t rejected_files_total = 0;    // files that were not valid segments
  uint64_t dropped_series_total = 0;    // registrations writers could not make
  uint64_t invalid_records_total = 0;   // records with bad metadata, skipped
  uint64_t read_errors_total = 0;       // files that could not be opened or read
};

// A live process that declared its server identity (gym/server_identity.h).
struct DeclaredServer {
  std::string name;
  std::string server_type;
  pid_t pid = 0;
  uint64_t start_ticks = 0;  // the owner's start time (/proc/<pid>/stat field 22)
};

struct Snapshot {
  // Sorted by family, then labels; a family's series are adjacent.
  std::vector<SeriesSample> series;
  RegistryStats stats;
  // Why files or records were skipped in this snapshot (each file or record
  // once), for the caller to log.
  std::vector<std::string> problems;
  // Empty, or why the directory itself could not be listed.
  std::string directory_error;
  // Live processes with a declared identity (one entry per process).
  std::vector<DeclaredServer> servers;
};

class RegistryReader {
 public:
  // Segments owned by a user outside `trusted_uids` are skipped and counted
  // (as rejected files). Empty: the owner of the directory and this
  // process's effective user.
  explicit RegistryReader(std::string dir, std::vector<uid_t> trusted_uids = {});
  ~RegistryReader();
  RegistryReader(const RegistryReader&) = delete;
  RegistryReader& operator=(const RegistryReader&) = delete;

  // Reads every segment now. The reference stays valid until the next call.
  const Snapshot& snapshot();

  const std::string& dir() const { return dir_; }

 private:
  struct Segment;
  struct Accumulator {
    bool present = false;
    uint64_t counter = 0;
    int64_t gauge = 0;
    int64_t sum = 0;
    std::vector<uint64_t> buckets;  // not cumulative
  };

  void list_directory();
  void open_segment(const std::string& name, ino_t ino);
  bool owner_alive(const Segment& s) const;
  int32_t series_of(Segment& s, uint32_t index);
  void add_values(Segment& s, std::vector<Accumulator>& into, bool gauges);
  void retire(Segment& s, bool remove_file);
  void find_declared_server(Segment& s);
  void reject(const std::string& name, ino_t ino, const std::string& why);
  void cleanup_stale_temp(const std::string& name);
  void build_output();

  bool trusted(uid_t owner);

  std::string dir_;
  std::vector<uid_t> trusted_uids_;
  bool default_trust_;
  int dir_fd_ = -1;
  std::unordered_map<std::string, std::unique_ptr<Segment>> segments_;
  std::unordered_map<std::string, ino_t> rejected_;  // name -> inode counted
  std::vector<std::string> listed_;                  // scratch

  std::unordered_map<std::string, uint32_t> series_ids_;  // identity key -> id
  std::vector<std::unique_ptr<SeriesInfo>> infos_;        // by id
  struct FamilyShape {
    segment::SeriesKind kind;
    std::vector<int64_t> bounds;
    double unit_divisor;
  };
  std::unordered_map<std::string, FamilyShape> families_;
  std::vector<uint32_t> order_;  // ids sorted by family, labels
  bool order_dirty_ = false;

  std::vector<Accumulator> retired_;  // by id: folded counters, histograms
  std::vector<Accumulator> current_;  // by id: this snapshot
  uint64_t retired_dropped_ = 0;

  Snapshot snapshot_;
};

}  // namespace gym
