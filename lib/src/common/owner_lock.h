// The owner lock of a segment: an OFD write lock on the whole file, held by
// the writer for as long as it lives (the kernel drops it when the process
// dies). Writer and reader must agree on it, so both use these.
#pragma once

#include <fcntl.h>

namespace gym::detail {

inline struct flock owner_lock_range() {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // the whole file
  return fl;
}

// Takes the owner lock; false (errno set) when it cannot.
inline bool take_owner_lock(int fd) {
  struct flock fl = owner_lock_range();
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

// Whether another open file description holds the owner lock: 1 yes, 0 no,
// -1 the kernel does not support OFD locks.
inline int owner_lock_held(int fd) {
  struct flock fl = owner_lock_range();
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return -1;
  return fl.l_type != F_UNLCK ? 1 : 0;
}

}  // namespace gym::detail
