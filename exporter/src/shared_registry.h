// The one registry reader of the exporter, shared by the collectors that need
// it (the registry collector; the server trees, for declared servers): a
// reader must be the only one of its directory.
//
// Thread-safety: with() serializes every use of the reader.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gym/registry_reader.h"

namespace gym::exporter {

class SharedRegistry {
 public:
  explicit SharedRegistry(std::string dir, ReaderOptions options = {})
      : reader_(std::move(dir), std::move(options)) {}
  // Runs f(reader) under the lock.
  template <class F>
  auto with(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    return f(reader_);
  }
  // The servers live writers declare, as the last snapshot (a scrape's, say)
  // found them when it is at most max_age old, else from a new one. A
  // snapshot reads every value of every segment: a process watcher that
  // only needs the declarations takes one a period at most.
  std::vector<DeclaredServer> servers(std::chrono::nanoseconds max_age) {
    std::lock_guard<std::mutex> lock(mu_);
    const Snapshot& last = reader_.last_snapshot();
    if (last.monotonic_ns > 0 && segment::precise_now_ns() - last.monotonic_ns <= max_age.count())
      return last.servers;
    return reader_.snapshot().servers;
  }

 private:
  std::mutex mu_;
  RegistryReader reader_;
};

}  // namespace gym::exporter
