// The folded totals' file in the registry directory, `.exporter-totals`
// (its format: totals_file.h): read and checked, written in place of the
// last atomically, and whether it is another file than the one last seen.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "reader/segment_set.h"
#include "reader/totals_file.h"

namespace gym::reader_internal {

class TotalsFile {
 public:
  enum class Read { kAbsent, kRead, kRefused, kCannotOpen };
  // Reads it (at `dir_fd`) into `t` when it is a regular file of a
  // sensible size, of a trusted owner, in the format, of this boot; else
  // why it was refused (kRefused), or errno is set (kCannotOpen).
  Read read(int dir_fd, const Trust& trust, detail::Totals& t, std::string& why);
  // Whether the file now is another (its inode, mtime or size) than the one
  // last read or looked at, which it becomes; `present`: whether there is one.
  bool changed(int dir_fd, bool& present);
  // `t` written to a temporary, synced and renamed over the file; else
  // false with errno, the temporary removed.
  bool write(int dir_fd, const detail::Totals& t);

 private:
  struct Seen {
    ino_t ino = 0;
    int64_t mtime_ns = 0;
    off_t size = 0;
    bool operator==(const Seen&) const = default;
  };
  Seen seen_;
};

}  // namespace gym::reader_internal
