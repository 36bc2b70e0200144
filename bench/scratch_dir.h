// A scratch registry directory for a benchmark program:
// /dev/shm/<prefix>-<pid>, emptied first and removed with everything in it
// when the program (not a forked child of it) exits, so that benchmarks leave nothing in /dev/shm.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace gym::bench {

inline std::string scratch_dir(const std::string& prefix) {
  static std::mutex mu;
  static std::vector<std::string>* dirs = new std::vector<std::string>;
  const std::string dir = "/dev/shm/" + prefix + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::lock_guard<std::mutex> lock(mu);
  static const pid_t owner = ::getpid();
  if (dirs->empty())
    std::atexit([] {
      if (::getpid() != owner) return;  // a forked child that exits: not its directories
      std::error_code ec;
      for (const std::string& d : *dirs) std::filesystem::remove_all(d, ec);
    });
  dirs->push_back(dir);
  return dir;
}

}  // namespace gym::bench
