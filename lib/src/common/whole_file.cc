#include "gym/whole_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>

namespace gym {

bool write_whole_file(int dir_fd, const char* name, const char* temp, std::string_view text,
                      mode_t mode, bool sync) {
  const int fd =
      ::openat(dir_fd, temp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
  int err = fd < 0 ? errno : 0;
  for (size_t put = 0; err == 0 && put < text.size();) {
    const ssize_t n = ::write(fd, text.data() + put, text.size() - put);
    if (n > 0)
      put += size_t(n);
    else if (n < 0 && errno != EINTR)
      err = errno;
    else if (n == 0)
      err = EIO;
  }
  if (err == 0 && sync && ::fsync(fd) != 0) err = errno;
  if (fd >= 0 && ::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::renameat(dir_fd, temp, dir_fd, name) != 0) err = errno;
  if (err == 0) return true;
  if (fd >= 0) ::unlinkat(dir_fd, temp, 0);
  errno = err;
  return false;
}

}  // namespace gym
