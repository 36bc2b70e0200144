#include "gym/registry_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

#include "gym/contract.h"
#include "label_rules.h"
#include "owner_lock.h"
#include "process_identity.h"

namespace gym {

using segment::Header;
using segment::Record;
using segment::SeriesKind;

namespace {

constexpr int32_t kUnparsed = -1;

constexpr int32_t kInvalid = -2;
// Layout sizes a header may declare; anything larger is not ours.
constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 30;
// A named temporary (only where O_TMPFILE is unsupported) older than this,
// and unlocked, was left by a writer that died while creating it.
constexpr time_t kStaleTempSeconds = 60;

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

struct RegistryReader::Segment {
  std::string name;
  ino_t ino = 0;
  int fd = -1;
  const unsigned char* base = nullptr;
  uint64_t size = 0;
  uint32_t max_records = 0;
  uint32_t value_lines = 0;
  uint64_t records_offset = 0;
  uint64_t values_offset = 0;
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  uint8_t boot_id[16] = {};
  std::vector<int32_t> record_series;  // series id, kUnparsed or kInvalid
  std::vector<uint8_t> record_shards;  // validated shard count of each record
  bool listed = false;

  const Header* header() const { return reinterpret_cast<const Header*>(base); }
  const Record* record(uint32_t i) const {
    return reinterpret_cast<const Record*>(base + records_offset +
                                           uint64_t{i} * segment::kRecordBytes);
  }
  const unsigned char* line(uint32_t l) const {
    return base + values_offset + uint64_t{l} * segment::kLineBytes;
  }
  uint32_t record_count() const {
    return std::min(segment::load_acquire(&header()->record_count), max_records);
  }
  ~Segment() {
    if (base != nullptr) ::munmap(const_cast<unsigned char*>(base), size);
    if (fd >= 0) ::close(fd);
  }
};

RegistryReader::RegistryReader(std::string dir, std::vector<uid_t> trusted_uids)
    : dir_(std::move(dir)),
      trusted_uids_(std::move(trusted_uids)),
      default_trust_(trusted_uids_.empty()) {}

bool RegistryReader::trusted(uid_t owner) {
  if (default_trust_) {
    // The directory's owner (looked up each time: it may be made later) and
    // our own effective user.
    struct stat st {};
    if (owner == ::geteuid()) return true;
    return dir_fd_ >= 0 && ::fstat(dir_fd_, &st) == 0 && st.st_uid == owner;
  }
  return std::find(trusted_uids_.begin(), trusted_uids_.end(), owner) != trusted_uids_.end();
}

RegistryReader::~RegistryReader() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void RegistryReader::reject(const std::string& name, ino_t ino, const std::string& why) {
  auto [it, inserted] = rejected_.try_emplace(name, ino);
  if (!inserted && it->second == ino) return;  // counted already
  it->second = ino;
  ++snapshot_.stats.rejected_files_total;
  snapshot_.problems.push_back("skipped " + dir_ + "/" + name + ": " + why);
}

void RegistryReader::cleanup_stale_temp(const std::string& name) {
  if (!(name.starts_with(".gym-") && ends_with(name, ".tmp"))) return;
  int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && detail::owner_lock_held(fd) == 0 &&
      st.st_mtime + kStaleTempSeconds < ::time(nullptr)) {
    ::unlinkat(dir_fd_, name.c_str(), 0);
  }
  ::close(fd);
}

void RegistryReader::open_segment(const std::string& name, ino_t ino) {
  int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return;  // removed since the listing
    if (errno == ELOOP) return reject(name, ino, "a symbolic link");
    ++snapshot_.stats.read_errors_total;
    snapshot_.problems.push_back("cannot open " + dir_ + "/" + name + ": " + std::strerror(errno));
    return;
  }
  auto seg = std::make_unique<Segment>();
  seg->name = name;
  seg->fd = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ++snapshot_.stats.read_errors_total;
    return;
  }
  seg->ino = st.st_ino;
  if (!S_ISREG(st.st_mode)) return reject(name, st.st_ino, "not a regular file");
  if (!trusted(st.st_uid))
    return reject(name, st.st_ino,
                  "owned by untrusted user " + std::to_string(st.st_uid) + ", ignored");
  if (st.st_size < static_cast<off_t>(segment::kHeaderBytes))
    return reject(name, st.st_ino, "truncated: shorter than a segment header");
  Header h;
  ssize_t got = ::pread(fd, &h, sizeof h, 0);
  if (got != static_cast<ssize_t>(sizeof h)) return reject(name, st.st_ino, "unreadable header");
  if (h.magic != segment::magic_word()) return reject(name, st.st_ino, "wrong magic");
  if (h.format_version != segment::kFormatVersion)
    return reject(name, st.st_ino,
                  "unsupported format version " + std::to_string(h.format_version));
  const uint64_t records_end =
      h.records_offset + uint64_t{h.max_records} * uint64_t{segment::kRecordBytes};
  const uint64_t values_end = h.values_offset + uint64_t{h.value_lines} * segment::kLineBytes;
  if (h.header_bytes != segment::kHeaderBytes || h.record_bytes != segment::kRecordBytes ||
      h.line_bytes != segment::kLineBytes || h.records_offset != segment::kHeaderBytes ||
      h.max_records == 0 || h.value_lines == 0 || h.values_offset != records_end ||
      h.total_bytes != values_end || h.total_bytes > kMaxSegmentBytes)
    return reject(name, st.st_ino, "inconsistent layout");
  if (static_cast<uint64_t>(st.st_size) < h.total_bytes)
    return reject(name, st.st_ino, "truncated: shorter than its layout");
  void* map = ::mmap(nullptr, h.total_bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    ++snapshot_.stats.read_errors_total;
    snapshot_.problems.push_back("cannot map " + dir_ + "/" + name + ": " + std::strerror(errno));
    return;
  }
  seg->base = static_cast<const unsigned char*>(map);
  seg->size = h.total_bytes;
  seg->max_records = h.max_records;
  seg->value_lines = h.value_lines;
  seg->records_offset = h.records_offset;
  seg->values_offset = h.values_offset;
  seg->pid = h.owner_pid;
  seg->start_ticks = h.owner_start_ticks;
  std::memcpy(seg->boot_id, h.owner_boot_id, sizeof seg->boot_id);
  seg->record_series.assign(h.max_records, kUnparsed);
  seg->record_shards.assign(h.max_records, 1);
  seg->listed = true;
  rejected_.erase(name);
  segments_[name] = std::move(seg);
}

bool RegistryReader::owner_alive(const Segment& s) const {
  int locked = detail::owner_lock_held(s.fd);
  if (locked >= 0) return locked == 1;
  uint8_t boot[16];
  if (detail::read_boot_id(boot) && std::memcmp(boot, s.boot_id, sizeof boot) != 0) return false;
  return detail::process_matches(s.pid, s.start_ticks);
}

// The series id of record `index`, parsing and interning its metadata the
// first time; kInvalid (counted once) for metadata that breaks the format.
int32_t RegistryReader::series_of(Segment& s, uint32_t index) {
  int32_t& cached = s.record_series[index];
  if (cached != kUnparsed) return cached;
  const Record* r = s.record(index);
  // Metadata is immutable once published; copy it out of shared memory.
  Record rec;
  std::memcpy(&rec, r, sizeof rec);
  auto invalid = [&](const char* why) {
    cached = kInvalid;
    ++snapshot_.stats.invalid_records_total;
    snapshot_.problems.push_back("skipped record " + std::to_string(index) + " of " + dir_ + "/" +
                                 s.name + ": " + why);
    return kInvalid;
  };
  if (rec.kind < 1 || rec.kind > 3) return invalid("unknown kind");
  const auto kind = static_cast<SeriesKind>(rec.kind);
  if (rec.label_count > segment::kMaxLabels) return invalid("too many labels");
  if (rec.bound_count > segment::kMaxBounds ||
      (kind != SeriesKind::kHistogram && rec.bound_count != 0))
    return invalid("bad bound count");
  if (rec.text_bytes > segment::kTextBytes) return invalid("text too long");
  const uint32_t shards = kind == SeriesKind::kHistogram ? rec.shards : 1;
  if (kind == SeriesKind::kHistogram &&
      (shards == 0 || shards > segment::kMaxShards || (shards & (shards - 1)) != 0))
    return invalid("bad shard count");
  const uint32_t lines = segment::value_lines_for(kind, rec.bound_count, shards);
  if (uint64_t{rec.value_line} + lines > s.value_lines) return invalid("value out of range");
  if (!(rec.unit_divisor > 0) || !std::isfinite(rec.unit_divisor)) return invalid("bad divisor");
  for (uint32_t i = 1; i < rec.bound_count; ++i)
    if (rec.bounds[i] <= rec.bounds[i - 1]) return invalid("bounds not increasing");

  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i < rec.text_bytes; ++i) {
    if (rec.text[i] == '\0') {
      parts.emplace_back(rec.text + start, i - start);
      start = i + 1;
    }
  }
  if (start != rec.text_bytes || parts.size() != 1 + 2 * size_t{rec.label_count})
    return invalid("malformed text");
  if (!detail::valid_metric_name(parts[0])) return invalid("bad family name");
  for (size_t i = 0; i < rec.label_count; ++i) {
    std::string_view name = parts[1 + 2 * i];
    if (!detail::valid_label_name(name)) return invalid("bad label name");
    if (i > 0 && !(parts[2 * i - 1] < name)) return invalid("labels not sorted");
    if (parts[2 + 2 * i].size() > segment::kMaxValueBytes) return invalid("label value too long");
  }

  s.record_shards[index] = static_cast<uint8_t>(shards);
  std::string key;
  key.push_back(static_cast<char>(kind));
  key.append(rec.text, rec.text_bytes);
  key.append(reinterpret_cast<const char*>(rec.bounds), sizeof(int64_t) * rec.bound_count);
  key.append(reinterpret_cast<const char*>(&rec.unit_divisor), sizeof rec.unit_divisor);
  auto it = series_ids_.find(key);
  if (it != series_ids_.end()) return cached = static_cast<int32_t>(it->second);

  std::vector<int64_t> bounds(rec.bounds, rec.bounds + rec.bound_count);
  std::string family(parts[0]);
  auto fam = families_.find(family);
  if (fam == families_.end()) {
    families_.emplace(family, FamilyShape{kind, bounds, rec.unit_divisor});
  } else if (fam->second.kind != kind || fam->second.bounds != bounds ||
             fam->second.unit_divisor != rec.unit_divisor) {
    return invalid("conflicts with the kind or buckets of its family");
  }
  auto info = std::make_unique<SeriesInfo>();
  info->kind = kind;
  info->family = std::move(family);
  for (size_t i = 0; i < rec.label_count; ++i)
    info->labels.emplace_back(std::string(parts[1 + 2 * i]), std::string(parts[2 + 2 * i]));
  info->bounds = std::move(bounds);
  info->unit_divisor = rec.unit_divisor;
  const auto id = static_cast<uint32_t>(infos_.size());
  infos_.push_back(std::move(info));
  series_ids_.emplace(std::move(key), id);
  retired_.emplace_back();
  current_.emplace_back();
  order_dirty_ = true;
  return cached = static_cast<int32_t>(id);
}

// Adds the segment's values into `into`; gauges only when `gauges`.
void RegistryReader::add_values(Segment& s, std::vector<Accumulator>& into, bool gauges) {
  const uint32_t count = s.record_count();
  for (uint32_t i = 0; i < count; ++i) {
    const Record* r = s.record(i);
    const uint32_t state = segment::load_acquire(&r->state);
    if (state != segment::kRecordLive) continue;
    const int32_t id = series_of(s, i);
    if (id < 0) continue;
    const SeriesInfo& info = *infos_[static_cast<size_t>(id)];
    Accumulator& acc = into[static_cast<size_t>(id)];
    const unsigned char* line = s.line(r->value_line);
    switch (info.kind) {
      case SeriesKind::kCounter:
        acc.counter += segment::load_relaxed(reinterpret_cast<const uint64_t*>(line));
        acc.present = true;
        break;
      case SeriesKind::kGauge:
        if (!gauges) break;
        acc.gauge = segment::wrapping_add(
            acc.gauge, segment::load_relaxed(reinterpret_cast<const int64_t*>(line)));
        acc.present = true;
        break;
      case SeriesKind::kHistogram: {
        const size_t n = info.bounds.size() + 1;
        if (acc.buckets.size() != n) acc.buckets.assign(n, 0);
        const size_t stride = segment::shard_lines(uint32_t(n - 1)) * segment::kLineBytes / 8;
        const auto* shard = reinterpret_cast<const uint64_t*>(line);
        for (uint32_t k = 0; k < s.record_shards[i]; ++k, shard += stride) {
          for (size_t b = 0; b < n; ++b) acc.buckets[b] += segment::load_relaxed(&shard[b]);
          acc.sum = segment::wrapping_add(
              acc.sum, segment::load_relaxed(reinterpret_cast<const int64_t*>(shard + n)));
        }
        acc.present = true;
        break;
      }
    }
  }
}

// The owner is gone (or its file was removed): keep its counters and
// histograms in the reader's totals, drop the rest, remove the file.
void RegistryReader::retire(Segment& s, bool remove_file) {
  add_values(s, retired_, /*gauges=*/false);
  retired_dropped_ += segment::load_relaxed(&s.header()->dropped_series);
  ++snapshot_.stats.retired_segments_total;
  if (remove_file) {
    struct stat st {};
    if (::fstatat(dir_fd_, s.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == s.ino)
      ::unlinkat(dir_fd_, s.name.c_str(), 0);
  }
}

void RegistryReader::list_directory() {
  for (auto& [name, seg] : segments_) seg->listed = false;
  if (dir_fd_ < 0) {
    dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd_ < 0) {
      snapshot_.directory_error = "cannot open " + dir_ + ": " + std::strerror(errno);
      return;
    }
  }
  int fd = ::dup(dir_fd_);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (d == nullptr) {
    if (fd >= 0) ::close(fd);
    snapshot_.directory_error = "cannot list " + dir_ + ": " + std::strerror(errno);
    return;
  }
  ::rewinddir(d);
  std::vector<std::pair<std::string, ino_t>> fresh;
  listed_.clear();
  while (dirent* e = ::readdir(d)) {
    std::string name(e->d_name);
    if (name == "." || name == "..") continue;
    if (name[0] == '.') {
      cleanup_stale_temp(name);
      continue;
    }
    listed_.push_back(name);
    auto it = segments_.find(name);
    if (it != segments_.end() && it->second->ino == e->d_ino) {
      it->second->listed = true;
      continue;
    }
    auto rej = rejected_.find(name);
    if (rej != rejected_.end() && rej->second == e->d_ino) continue;
    fresh.emplace_back(std::move(name), e->d_ino);
  }
  ::closedir(d);
  // Forget rejections of files that are gone, so a new file of that name is
  // examined (and, if bad, counted) again.
  if (!rejected_.empty()) {
    std::sort(listed_.begin(), listed_.end());
    for (auto it = rejected_.begin(); it != rejected_.end();) {
      if (!std::binary_search(listed_.begin(), listed_.end(), it->first))
        it = rejected_.erase(it);
      else
        ++it;
    }
  }
  for (auto& [name, ino] : fresh) {
    auto it = segments_.find(name);
    if (it != segments_.end()) {  // same name, new file: the old one is gone
      retire(*it->second, /*remove_file=*/false);
      segments_.erase(it);
    }
    if (ends_with(name, ".seg") && name.starts_with("gym-")) {
      open_segment(name, ino);
    } else {
      reject(name, ino, "not a segment name");
    }
  }
}

const Snapshot& RegistryReader::snapshot() {
  snapshot_.problems.clear();
  snapshot_.directory_error.clear();
  list_directory();

  // First retire the segments whose owners are gone, so that this snapshot
  // already counts their values in the totals; then add the live ones.
  for (auto it = segments_.begin(); it != segments_.end();) {
    Segment& s = *it->second;
    // A directory we cannot list leaves segments as they were.
    const bool removed = !s.listed && snapshot_.directory_error.empty();
    if (removed || !owner_alive(s)) {
      retire(s, /*remove_file=*/!removed);
      it = segments_.erase(it);
    } else {
      ++it;
    }
  }
  for (size_t i = 0; i < current_.size(); ++i) {
    Accumulator& cur = current_[i];
    const Accumulator& ret = retired_[i];
    cur.present = ret.present;
    cur.counter = ret.counter;
    cur.gauge = 0;
    cur.sum = ret.sum;
    if (ret.buckets.empty())
      std::fill(cur.buckets.begin(), cur.buckets.end(), 0);
    else
      cur.buckets = ret.buckets;
  }
  uint64_t live = 0;
  uint64_t dropped = 0;
  snapshot_.servers.clear();
  for (auto& [name, seg] : segments_) {
    add_values(*seg, current_, /*gauges=*/true);
    find_declared_server(*seg);
    dropped += segment::load_relaxed(&seg->header()->dropped_series);
    ++live;
  }
  snapshot_.stats.live_segments = live;
  snapshot_.stats.dropped_series_total = retired_dropped_ + dropped;
  build_output();
  return snapshot_;
}

// The identity this segment's owner declared, if any (its live
// gym_server_identity record).
void RegistryReader::find_declared_server(Segment& s) {
  const uint32_t count = s.record_count();
  for (uint32_t i = 0; i < count; ++i) {
    if (segment::load_acquire(&s.record(i)->state) != segment::kRecordLive) continue;
    const int32_t id = series_of(s, i);
    if (id < 0) continue;
    const SeriesInfo& info = *infos_[size_t(id)];
    if (info.family != family::kServerIdentity || info.kind != SeriesKind::kGauge) continue;
    DeclaredServer server;
    for (const auto& [k, v] : info.labels) {
      if (k == label::kServerName) server.name = v;
      if (k == label::kServerType) server.server_type = v;
    }
    if (server.name.empty()) continue;
    server.pid = s.pid;
    server.start_ticks = s.start_ticks;
    snapshot_.servers.push_back(std::move(server));
    return;
  }
}

void RegistryReader::build_output() {
  if (order_dirty_) {
    order_.resize(infos_.size());
    for (uint32_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::sort(order_.begin(), order_.end(), [this](uint32_t a, uint32_t b) {
      const SeriesInfo& x = *infos_[a];
      const SeriesInfo& y = *infos_[b];
      if (x.family != y.family) return x.family < y.family;
      return x.labels < y.labels;
    });
    order_dirty_ = false;
  }
  size_t n = 0;
  for (uint32_t id : order_) {
    const Accumulator& acc = current_[id];
    if (!acc.present) continue;
    if (snapshot_.series.size() <= n) snapshot_.series.emplace_back();
    SeriesSample& out = snapshot_.series[n++];
    const SeriesInfo& info = *infos_[id];
    out.info = &info;
    out.counter = acc.counter;
    out.gauge = acc.gauge;
    out.sum = acc.sum;
    if (info.kind == SeriesKind::kHistogram) {
      const size_t buckets = info.bounds.size() + 1;
      out.cumulative_buckets.resize(buckets);
      uint64_t running = 0;
      for (size_t b = 0; b < buckets; ++b) {
        running += b < acc.buckets.size() ? acc.buckets[b] : 0;
        out.cumulative_buckets[b] = running;
      }
    } else {
      out.cumulative_buckets.clear();
    }
  }
  snapshot_.series.resize(n);
}

}  // namespace gym
