// The registry directory as the reader knows it: its open segments, the
// markers of writers running unmetered, and the names it skips (folded in,
// rejected, failing to read), each for one inode. core.h says how a file
// moves between these.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gym/registry_reader.h"
#include "reader/segment.h"

namespace gym::reader_internal {

// Who may write the registry: the directory's owner and our own user, or
// the configured uids.
class Trust {
 public:
  explicit Trust(std::vector<uid_t> uids) : uids_(std::move(uids)) {}
  bool operator()(uid_t owner, int dir_fd) const;

 private:
  std::vector<uid_t> uids_;
};

// Whether a segment's owner still runs.
bool owner_alive(const Segment& s);

class SegmentSet {
 public:
  using Map = std::unordered_map<std::string, std::unique_ptr<Segment>>;

  // `dir` names the directory in messages; counts and problems go to `out`.
  SegmentSet(const std::string& dir, const Trust& trust, Snapshot& out)
      : dir_(dir), trust_(trust), out_(out) {}
  ~SegmentSet();
  SegmentSet(const SegmentSet&) = delete;
  SegmentSet& operator=(const SegmentSet&) = delete;

  // Marks every segment and marker unlisted, for list() to find again.
  void unlist();
  // Lists the directory (open at `dir_fd`): known files are listed again,
  // new ones examined; a segment whose name now has a new file goes to
  // `replaced` (the old file is gone). The retiring reader removes stale
  // temporaries.
  void list(int dir_fd, bool retiring, std::vector<std::unique_ptr<Segment>>& replaced);
  // Live markers count as unmetered writers; a dead one is forgotten (and,
  // when `retiring`, its file removed).
  void check_markers(int dir_fd, bool retiring);

  Map& open() { return segments_; }
  Map::iterator erase(Map::iterator it) { return segments_.erase(it); }

  // Folded segments: skipped while their files stay. Until the totals are
  // written, the retiring reader's own (then removed: remove_folded); read
  // only, its own and the holder's (adopt_holders).
  void fold(const std::string& name, ino_t ino) { folded_[name] = ino; }
  void adopt_existing(const std::vector<std::string>& names, int dir_fd);
  void adopt_holders(const std::vector<std::string>& names);
  void forget_folded();
  bool any_folded() const { return !folded_.empty(); }
  std::vector<std::string> folded_names() const;
  void remove_folded(int dir_fd);

  // A file that could not be read: counted every time, logged once an inode.
  void read_error(const std::string& name, ino_t ino, const std::string& what);

 private:
  struct Marker {
    int fd = -1;
    ino_t ino = 0;
    bool listed = false;
  };
  bool known(int dir_fd, const std::string& name, ino_t ino);
  void forget_unlisted();
  void open_segment(int dir_fd, const std::string& name, ino_t ino);
  void open_marker(int dir_fd, const std::string& name, ino_t ino);
  void reject(const std::string& name, ino_t ino, const std::string& why);
  void cleanup_stale_temp(int dir_fd, const std::string& name);

  const std::string& dir_;
  const Trust& trust_;
  Snapshot& out_;
  Map segments_;
  std::unordered_map<std::string, Marker> markers_;
  std::unordered_map<std::string, ino_t> rejected_;     // name -> inode counted
  std::unordered_map<std::string, ino_t> read_failed_;  // name -> inode reported
  std::unordered_map<std::string, ino_t> folded_;       // name -> inode folded in
  std::unordered_set<std::string> folded_by_holder_;    // read only: the holder's
  std::vector<std::string> listed_;                     // scratch
};

}  // namespace gym::reader_internal
