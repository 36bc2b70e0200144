// For the tests of what a server is and what its tree uses: the servers
// collector and the memory collector on one watcher, sampled together, as the
// exporter builds them, with one record a server of what both say
// (what MemoryCollector alone said before the servers unit).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectors/memory.h"
#include "collectors/servers.h"
#include "config.h"
#include "servers/watcher.h"

namespace gym::testing {

using exporter::Emit;
using exporter::Log;
using exporter::MemoryCollector;
using exporter::MemoryConfig;
using exporter::ServersCollector;
using exporter::ServersConfig;
using exporter::ServerTarget;
using exporter::ServerWatcher;
using exporter::SharedRegistry;

// A server that is the process tree under `pid`.
inline ServerTarget pid_target(const std::string& name, const std::string& type, pid_t pid) {
  ServerTarget t;
  t.name = name;
  t.server_type = type;
  t.pid = pid;
  return t;
}

// The keys these tests set, wherever they live now (servers: or memory:).
struct SamplerConfig {
  double interval_seconds = 5;
  double pss_interval_seconds = 0;
  exporter::PssBudgetConfig budget;
  double gone_server_ttl_seconds = 300;
  std::string proc_root = "/proc";
  std::vector<ServerTarget> targets;
  ServersConfig servers() const {
    ServersConfig s;
    s.interval_seconds = interval_seconds;
    s.proc_root = proc_root;
    s.targets = targets;
    s.gone_server_ttl_seconds = gone_server_ttl_seconds;
    return s;
  }
};

class ServerSampler {
 public:
  ServerSampler(const SamplerConfig& c, std::shared_ptr<SharedRegistry> registry, Log log)
      : watcher(exporter::make_watcher(c.servers(), std::move(registry), log)),
        servers_unit(watcher, log),
        memory(MemoryConfig{c.interval_seconds, c.pss_interval_seconds, c.budget}, watcher, log) {}

  // As the exporter builds them from a loaded configuration.
  ServerSampler(const exporter::Config& c, std::shared_ptr<SharedRegistry> registry, Log log)
      : watcher(exporter::make_watcher(c.servers, std::move(registry), log)),
        servers_unit(watcher, log),
        memory(exporter::collector_settings<exporter::MemorySettings>(c, "memory").config(),
               watcher, log) {}

  struct Server : MemoryCollector::ServerMemory {
    std::optional<pid_t> root_pid;
    std::vector<pid_t> root_pids;
    uint64_t escaped = 0, exits = 0, oom_kill_exits = 0;
    std::optional<double> oldest_process_seconds;
  };
  // One sample of both, on one resolution.
  void sample() {
    servers_unit.refresh();
    memory.refresh();
  }
  void start() {
    servers_unit.start();
    memory.start();
  }
  void stop() {
    servers_unit.stop();
    memory.stop();
  }
  // The memory collector's servers with what the servers collector says of each.
  std::vector<Server> servers() const {
    std::map<std::string, ServersCollector::Server> unit;
    for (const auto& s : servers_unit.servers()) unit[s.name] = s;
    std::vector<Server> out;
    for (const auto& m : memory.servers()) {
      Server s;
      static_cast<MemoryCollector::ServerMemory&>(s) = m;
      if (auto it = unit.find(m.name); it != unit.end()) {
        s.root_pid = it->second.root_pid;
        s.root_pids = it->second.root_pids;
        s.escaped = it->second.escaped;
        s.exits = it->second.exits;
        s.oom_kill_exits = it->second.oom_kill_exits;
        s.oldest_process_seconds = it->second.oldest_process_seconds;
      }
      out.push_back(std::move(s));
    }
    return out;
  }
  void collect(const Emit& emit) {
    servers_unit.collect(emit);
    memory.collect(emit);
  }

  std::shared_ptr<ServerWatcher> watcher;
  ServersCollector servers_unit;
  MemoryCollector memory;
};

}  // namespace gym::testing
