// Helpers for the exporter's tests that run programs: a program with its
// output on a pipe (killed with its process group at the end), the children
// of a process, and whether pid namespaces can be made here.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gym/segment_writer.h"
#include "host/procfs.h"
#include "test_support.h"

namespace gym::testing {

// A program run with its stdout on a pipe; killed (its process group) at the
// end.
class Program {
 public:
  Program(std::vector<std::string> argv, const std::string& registry) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
      ::setenv(SegmentWriter::kDirEnv, registry.c_str(), 1);
      std::vector<char*> args;
      for (std::string& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
  }
  ~Program() { stop(); }
  // The first line it prints ("" when it ends first).
  std::string line() {
    char buf[256];
    if (out_ == nullptr || std::fgets(buf, sizeof buf, out_) == nullptr) return "";
    return buf;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    wait_exit(pid_);
    pid_ = 0;
    if (out_ != nullptr) std::fclose(out_);
    out_ = nullptr;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
  FILE* out_ = nullptr;
};

// The children of `pid` (every thread's).
inline std::vector<pid_t> children_of(pid_t pid) {
  std::string text;
  exporter::procfs::read_file(
      "/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children", text);
  return exporter::procfs::parse_children(text).value_or(std::vector<pid_t>{});
}

// Whether `unshare --pid --fork --mount-proc` works here (root, a kernel
// that allows it).
inline bool unshare_works() {
  return std::system("unshare --pid --fork --mount-proc true >/dev/null 2>&1") == 0;
}

}  // namespace gym::testing
