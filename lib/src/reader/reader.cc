// The registry reader: its life, the directory lock, snapshots (the rest is
// in reader/*.cc; see reader/core.h).
#include <thread>

#include "reader/core.h"

namespace gym {

using namespace reader_internal;  // NOLINT: the reader's own parts, in this file

ReaderCore::ReaderCore(std::string dir, ReaderOptions options)
    : dir_(std::move(dir)), options_(std::move(options)), trust_(options_.trusted_uids) {
  detail::install_fault_handler();
  snapshot_.reader_started_unix_ns = now_ns();
}

ReaderCore::~ReaderCore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

RegistryReader::RegistryReader(std::string dir, ReaderOptions options)
    : core_(std::make_unique<ReaderCore>(std::move(dir), std::move(options))) {}
RegistryReader::~RegistryReader() = default;
bool RegistryReader::claim(std::string* why, std::chrono::milliseconds patience) {
  return core_->claim(why, patience);
}
uint64_t RegistryReader::fold_exited(const std::string& dir, std::chrono::milliseconds patience) {
  ReaderOptions options;
  options.mode = ReaderOptions::Mode::kFold;
  ReaderCore core(dir, std::move(options));
  std::string why;
  if (!core.claim(&why, patience) || !core.retiring()) return 0;
  return core.snapshot().stats.retired_segments_total;
}
bool RegistryReader::retiring() const {
  return core_->retiring();
}
const Snapshot& RegistryReader::snapshot() {
  return core_->snapshot();
}
const Snapshot& RegistryReader::last_snapshot() const {
  return core_->last_snapshot();
}
const std::string& RegistryReader::dir() const {
  return core_->dir();
}

// ---------------------------------------------------------------- the lock

bool ReaderCore::open_dir() {
  if (dir_fd_ >= 0) return true;
  dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return dir_fd_ >= 0;
}

bool ReaderCore::try_lock(std::string* why) {
  int fd = ::openat(dir_fd_, kLockFile, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = "cannot open " + dir_ + "/" + kLockFile + ": " + std::strerror(errno);
    return false;
  }
  if (!detail::take_owner_lock(fd)) {
    // The holder's pid, after "fold " when it is a writer folding segments.
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string pid = n > 0 ? std::string(buf, size_t(n)) : std::string("unknown");
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    // An empty file is a holder between taking the lock and writing who it
    // is: a folding writer as likely as an exporter, so waited for as one
    // (an exporter that cannot write its pid is refused once patience ends).
    holder_folds_ = n <= 0 || pid.starts_with(kFolderTag);
    if (holder_folds_ && n > 0)
      *why = "a writer (pid " + pid.substr(std::strlen(kFolderTag)) +
             ") is folding the exited segments of " + dir_ + " (it holds " + kLockFile + ")";
    else
      *why = "another gym-exporter (pid " + pid + ") retires the segments of " + dir_ +
             " (it holds " + kLockFile + ")";
    ::close(fd);
    return false;
  }
  char buf[32];
  char* end = buf;
  if (options_.mode == ReaderOptions::Mode::kFold)
    for (const char* t = kFolderTag; *t != '\0'; ++t) *end++ = *t;
  end = detail::format_decimal(end, static_cast<uint64_t>(::getpid()));
  *end++ = '\n';
  if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, buf, size_t(end - buf), 0) < 0) {
    // A full file system: the pid stays unknown to a second exporter.
  }
  lock_fd_ = fd;
  // Take over from read-only state: the totals are the file's now.
  values_.drop_retired();
  segments_.forget_folded();  // folded while reading only: read again, into the file's totals
  load_totals(/*adopt_folded=*/true);
  return true;
}

bool ReaderCore::claim(std::string* why, std::chrono::milliseconds patience) {
  if (lock_fd_ >= 0) return true;
  if (!open_dir()) {
    if (errno == ENOENT) return true;  // taken by the first snapshot that finds it
    *why = "cannot open " + dir_ + ": " + std::strerror(errno);
    return false;
  }
  // A folding writer lets go within milliseconds; an exporter never does.
  const auto until = std::chrono::steady_clock::now() + patience;
  while (!try_lock(why)) {
    if (!holder_folds_ || std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// ---------------------------------------------------------------- snapshot

// Exited writers' segments (and dead markers) folded and removed while the
// lock is free, then the lock let go: a writer's cleaning, not a reading.
const Snapshot& ReaderCore::fold_snapshot() {
  snapshot_.problems.clear();
  snapshot_.directory_error.clear();
  std::string why;
  if (!open_dir() || (!retiring() && !try_lock(&why))) return snapshot_;
  list_directory();
  retire_gone_owners();
  segments_.check_markers(dir_fd_, retiring());
  if (totals_dirty_) persist_totals();
  // The directory's size now (on tmpfs, 20 bytes an entry) beside our pid,
  // for the next writer to tell how much it grew since (writer/folding.h).
  struct stat st {};
  if (::fstat(dir_fd_, &st) == 0) {
    const std::string note = std::string(kFolderTag) + std::to_string(::getpid()) + " " +
                             std::to_string(st.st_size) + "\n";
    if (::ftruncate(lock_fd_, 0) == 0 && ::pwrite(lock_fd_, note.data(), note.size(), 0) < 0) {
      // A full file system: the next writer folds on time alone.
    }
  }
  ::close(lock_fd_);
  lock_fd_ = -1;
  return snapshot_;
}

const Snapshot& ReaderCore::snapshot() {
  if (options_.mode == ReaderOptions::Mode::kFold) return fold_snapshot();
  snapshot_.problems.clear();
  snapshot_.directory_error.clear();
  snapshot_.servers.clear();
  snapshot_.writers.clear();
  snapshot_.stats.unmetered_writers = 0;
  snapshot_.stats.registry_bytes = 0;
  snapshot_.stats.live_segments_by_version = {};
  snapshot_.monotonic_ns = segment::precise_now_ns();
  const int64_t now = now_ns();
  if (options_.mode == ReaderOptions::Mode::kRetire && !retiring() && open_dir()) {
    std::string why;
    if (!try_lock(&why)) {
      if (!lock_refused_) snapshot_.problems.push_back(why + "; reading without retiring");
      lock_refused_ = true;
    }
  }
  if (!retiring() && open_dir()) follow_holders_totals();
  list_directory();
  retire_gone_owners();
  read_live_segments();
  segments_.check_markers(dir_fd_, retiring());
  expire_series(now);
  if (retiring() && totals_dirty_) persist_totals();
  if (struct stat st{};
      open_dir() && ::fstatat(dir_fd_, kTotalsFile, &st, AT_SYMLINK_NOFOLLOW) == 0)
    snapshot_.stats.registry_bytes += uint64_t(st.st_blocks) * 512;
  snapshot_.stats.series = series_.live();
  snapshot_.stats.retiring = retiring();
  build_output();
  return snapshot_;
}

// A read-only reader follows the retiring reader's totals when they change:
// what it folded itself is read again beside them.
void ReaderCore::follow_holders_totals() {
  bool present = false;
  if (!totals_file_.changed(dir_fd_, present)) return;
  values_.drop_retired();
  retired_dropped_ = 0;
  segments_.forget_folded();
  if (present) load_totals(/*adopt_folded=*/false);
}

// The directory listed (segments_ says how); a segment whose name has a new
// file is the old one's end: retired (by the retiring reader) and let go of.
void ReaderCore::list_directory() {
  segments_.unlist();
  if (!open_dir()) {
    snapshot_.directory_error = "cannot open " + dir_ + ": " + std::strerror(errno);
    return;
  }
  std::vector<std::unique_ptr<Segment>> replaced;
  segments_.list(dir_fd_, retiring(), replaced);
  for (std::unique_ptr<Segment>& s : replaced) {
    if (retiring()) retire(*s);
    let_go(*s);
  }
}

// Owners that are gone: their counters and histograms are folded in once
// and their segments let go of. The retiring reader writes them into the
// totals and removes the files; a read-only reader keeps them in its own
// totals and skips the files while they stay (a dead owner's values no
// longer change), until the holder's totals change.
void ReaderCore::retire_gone_owners() {
  SegmentSet::Map& open = segments_.open();
  for (auto it = open.begin(); it != open.end();) {
    Segment& s = *it->second;
    const bool removed = !s.listed && snapshot_.directory_error.empty();
    const bool alive = !removed && owner_alive(s);
    s.dead = !alive;
    if (!alive && (retiring() || !removed)) retire(s);
    if (!alive)
      it = drop_segment(it);
    else
      ++it;
  }
}

// Every open segment's values into this snapshot's accumulators (a dead
// one's, kept by a read-only reader, into the totals), and its writer.
void ReaderCore::read_live_segments() {
  values_.begin_snapshot();
  uint64_t live = 0;
  uint64_t dropped = 0;
  limits_.begin();
  for (auto& [name, seg] : segments_.open()) {
    reading_.read_segment(*seg, /*gauges=*/!seg->dead);
    dropped = sat_add(dropped, seg->dropped);
    if (seg->dead) continue;
    snapshot_.writers.push_back(
        {seg->pid, seg->start_ticks, seg->version, seg->damaged, seg->pid_ns});
    if (seg->damaged) {
      ++snapshot_.stats.unmetered_writers;
      continue;
    }
    ++live;
    ++snapshot_.stats.live_segments_by_version[seg->version];
  }
  snapshot_.stats.live_segments = live;
  snapshot_.stats.dropped_series_total = sat_add(retired_dropped_, dropped);
}

void ReaderCore::build_output() {
  bool reordered = false;
  const std::vector<uint32_t>& order = series_.order(reordered);
  if (reordered) ++snapshot_.series_epoch;
  size_t n = 0;
  values_.begin_output();
  for (uint32_t id : order) {
    const Accumulator& live = values_.live(id);
    const Accumulator& ret = values_.retired_or_none(id);
    if (!live.present && !ret.present) continue;
    if (snapshot_.series.size() <= n) snapshot_.series.emplace_back();
    SeriesSample& out = snapshot_.series[n++];
    out.info = series_.info(id);
    out.family = series_.family(id);
    const SeriesTable::FamilyShape& shape = series_.family_shape(out.family);
    limits_.place(id, n - 1);
    out.counter = sat_add(live.counter, ret.counter);
    out.gauge = live.gauge;
    out.oldest_start = live.oldest;
    out.in_progress = live.in_progress;
    out.sum = segment::wrapping_add(live.sum, ret.sum);
    out.created_unix_ns = 0;
    if (shape.kind != SeriesKind::kGauge && !(live.present && live.created_unknown) &&
        !(ret.present && ret.created_unknown)) {
      const int64_t a = live.present ? live.created_ns : 0;
      const int64_t b = ret.present ? ret.created_ns : 0;
      out.created_unix_ns = a == 0 ? b : b == 0 ? a : std::min(a, b);
    }
    if (shape.kind == SeriesKind::kHistogram) {
      const size_t buckets = shape.bounds.size() + 1;
      // The live words: one segment's, viewed, or those added up of several.
      const uint64_t* own = live.view != nullptr ? live.view
                            : live.added >= 2    ? live.buckets.data()
                                                 : nullptr;
      out.cumulative_buckets.resize(buckets);
      uint64_t running = 0;
      for (size_t b = 0; b < buckets; ++b) {
        running = sat_add(running, own != nullptr ? own[b] : 0);
        running = sat_add(running, b < ret.buckets.size() ? ret.buckets[b] : 0);
        out.cumulative_buckets[b] = running;
      }
      out.native = values_.native_view(own, ret, buckets, shape.native_words);
      out.exemplars = values_.exemplars_of(id);
    } else {
      out.cumulative_buckets.clear();
      out.native = {};
      out.exemplars = {};
    }
  }
  snapshot_.series.resize(n);
  limits_.rows(snapshot_);
}

}  // namespace gym
