// Per-process entries (open descriptors) kept from one scan of a proc root
// to the next: a scan marks what it reads; sweep() closes what it did not.
// One cache for StatFiles and TreeFiles (procfs.h).
//
// Thread-safety: none; one KeptFiles belongs to one thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <unordered_map>
#include <utility>

namespace gym::exporter::procfs {

// Entry: a `bool read` (read since the last sweep) and a `void close()`
// that releases what it holds.
template <class Entry>
class KeptFiles {
 public:
  KeptFiles() = default;
  ~KeptFiles() { clear(); }
  KeptFiles(const KeptFiles&) = delete;
  KeptFiles& operator=(const KeptFiles&) = delete;

  // Under another proc root nothing kept applies: closes all and returns
  // true when `root` is not the root of what is kept.
  bool use_root(const std::string& root) {
    if (root == root_) return false;
    clear();
    root_ = root;
    return true;
  }
  // The entry kept for `pid`, or nullptr.
  Entry* find(pid_t pid) {
    auto it = map_.find(pid);
    return it == map_.end() ? nullptr : &it->second;
  }
  // Keeps `e` for `pid`, read in this scan.
  void keep(pid_t pid, Entry e) {
    e.read = true;
    map_.insert_or_assign(pid, std::move(e));
  }
  // Closes and forgets the entry of `pid` (reaped: the pid may be another
  // process's now).
  void drop(pid_t pid) {
    auto it = map_.find(pid);
    if (it == map_.end()) return;
    it->second.close();
    map_.erase(it);
  }
  // Closes the entries not read since the last sweep; unmarks the others.
  void sweep() {
    for (auto it = map_.begin(); it != map_.end();) {
      if (it->second.read) {
        it->second.read = false;
        ++it;
      } else {
        it->second.close();
        it = map_.erase(it);
      }
    }
  }
  size_t size() const { return map_.size(); }

 private:
  void clear() {
    for (auto& [pid, e] : map_) e.close();
    map_.clear();
  }
  std::string root_;
  std::unordered_map<pid_t, Entry> map_;
};

}  // namespace gym::exporter::procfs
