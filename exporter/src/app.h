// The running exporter: the configuration in effect, the registry reader, the
// collectors and the HTTP server, and the two things that change them:
// reload() and stop(). main.cc only parses flags and waits for signals.
//
// Thread-safety: reload() and stop() from one thread (main's signal loop);
// scrapes are served meanwhile.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "collector.h"
#include "collectors/verdict.h"
#include "config.h"
#include "exposition/exposition.h"
#include "flags.h"
#include "http/server.h"
#include "servers/board.h"
#include "web_config.h"
#include "wiring.h"

namespace gym::exporter {

// Every file the flags name, read and validated: nothing is applied unless
// all of them are valid.
struct Loaded {
  ConfigResult config;
  WebConfigResult web;
  bool ok() const { return config.ok() && web.ok(); }
  std::vector<std::string> errors() const;
};
Loaded load(const Flags& flags);

// Logs each deprecated key a configuration uses, once a process.
void warn_deprecations(const ConfigResult& c);

// --once: one exposition of `loaded`, to standard output.
int print_once(const Loaded& loaded);

class App {
 public:
  // Claims the registry directory, starts the collectors (their first
  // samples), then serves. nullptr with a one-line reason in `error`.
  static std::unique_ptr<App> start(const Flags& flags, const Loaded& loaded, std::string* error);
  ~App();
  // Reads every file again; applies the result only when all are valid
  // (else logs why and keeps everything as it was). False when refused.
  bool reload();
  // The collectors' final work while scrapes are still served, then the
  // HTTP server.
  void stop();
  int port() const { return server_->port(); }

 private:
  App(Flags flags, const Loaded& loaded);
  void apply(Config next, const WebConfig& web);
  // /api/v1/snapshot: the registry as gym-stat --json shows it, its servers
  // as the collectors' last samples (the board) say.
  std::string snapshot_json();
  // /api/v1/deaths: the death records that match the query.
  std::string deaths_json(const std::string& query, std::string* error) const;

  Flags flags_;
  Config config_;
  WebConfig web_;
  std::shared_ptr<SharedRegistry> registry_;
  std::unique_ptr<Exposition> exposition_;
  // Guards what HTTP threads read: config_ (the landing page's), registry_
  // (the pointer).
  std::mutex state_mu_;
  std::unique_ptr<HttpServer> server_;
  SdFile sd_;  // this exporter's file_sd entry, while it runs
  // What the collectors' last samples say of each server, for the snapshot.
  std::shared_ptr<ServerBoard> board_ = std::make_shared<ServerBoard>();
  // Deaths of servers' processes: kept across reloads (the collectors' go).
  std::shared_ptr<DeathLog> deaths_;
  // The verdict collector's last verdict: kept across reloads.
  std::shared_ptr<VerdictBoard> verdicts_ = std::make_shared<VerdictBoard>();
};

}  // namespace gym::exporter
