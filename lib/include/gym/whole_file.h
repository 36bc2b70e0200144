// A file written whole or not at all: the bytes go into a temporary beside
// it (of the mode given, not through a link; flushed to its device first
// when asked), which is then renamed over it, so that a reader (or an
// exporter started after a crash) finds the old file or the new, never
// half of one. The one atomic-file writer of the project: the reader's
// totals, and through the exporter's procfs::write_file_whole its cgroup
// totals, death counts, file_sd entry and final capture.
//
// Thread-safety: none needed; two writers of one file must not share
// `temp`.
//
// Internal (docs/api.md): installed for the exporter; no compatibility promise.
#pragma once

#include <sys/types.h>

#include <string_view>

namespace gym {

// Writes `text` as the file `name` of the directory `dir_fd` (AT_FDCWD: of
// the working directory, or `name` absolute) through the temporary `temp`
// of the same directory. Returns false with errno set (the temporary is
// removed, the file left as it was).
bool write_whole_file(int dir_fd, const char* name, const char* temp, std::string_view text,
                      mode_t mode, bool sync);

}  // namespace gym
