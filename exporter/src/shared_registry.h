// The one registry reader of the exporter, shared by the collectors that need
// it (the registry collector; the server trees, for declared servers): a
// reader must be the only one of its directory.
//
// Thread-safety: with() serializes every use of the reader.
#pragma once

#include <mutex>
#include <string>
#include <utility>

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

 private:
  std::mutex mu_;
  RegistryReader reader_;
};

}  // namespace gym::exporter
