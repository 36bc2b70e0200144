// The wiring of the collecting side: the registry reader's options and one
// collector of every kind from a configuration. What the exporter (app.cc)
// and gym-stat both build, and all they share of the exporter: neither the
// HTTP server nor the encoders are part of it (CMake: gymcollect).
//
// Thread-safety: pure functions over their arguments.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "collector.h"
#include "config.h"
#include "gym/registry_reader.h"

namespace gym::exporter {

ReaderOptions reader_options(const Config& c);

// One collector of every registered kind, with its section of `c`, and one
// watcher of `c`'s servers for all of them; `only` (when not empty) names
// the kinds wanted.
std::vector<std::unique_ptr<Collector>> make_collectors(const Config& c,
                                                        const CollectorContext& context,
                                                        const std::set<std::string>& only = {});

}  // namespace gym::exporter
