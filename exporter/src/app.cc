#include "app.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "build_info.h"
#include "final_capture.h"
#include "http/request.h"
#include "landing_page.h"
#include "logging.h"
#include "self_metrics.h"
#include "servers/deaths.h"
#include "servers/watcher.h"
#include "snapshot/view.h"

namespace gym::exporter {

std::vector<std::string> Loaded::errors() const {
  std::vector<std::string> out = config.errors;
  out.insert(out.end(), web.errors.begin(), web.errors.end());
  return out;
}

Loaded load(const Flags& flags) {
  Loaded l;
  l.config =
      flags.config_file.empty() ? parse_config("", "flags") : load_config_file(flags.config_file);
  if (l.config.ok()) {
    flags.overrides.apply(l.config.config);
    l.config.errors =
        validate(l.config.config, flags.config_file.empty() ? "flags" : flags.config_file);
    if (std::string p = registry_dir_problem(l.config.config.registry_dir); !p.empty())
      l.config.errors.push_back(p);
  }
  if (!flags.web_config_file.empty()) l.web = load_web_config_file(flags.web_config_file);
  return l;
}

void warn_deprecations(const ConfigResult& c) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  for (const std::string& d : c.deprecations)
    if (said.insert(d).second) spdlog::warn("{}", d);
}

namespace {
CollectorContext context_for(std::shared_ptr<SharedRegistry> registry,
                             std::shared_ptr<ServerBoard> board = nullptr,
                             std::shared_ptr<DeathLog> deaths = nullptr,
                             std::shared_ptr<VerdictBoard> verdicts = nullptr) {
  // A problem seen at every scrape or sample is one line a minute.
  static RateLimitedLog warnings;
  return {std::move(registry),
          [](const std::string& problem) { warnings.warn(problem); },
          nullptr,
          std::move(board),
          std::move(deaths),
          std::move(verdicts)};
}
}  // namespace

int print_once(const Loaded& loaded) {
  const Config& c = loaded.config.config;
  // Beside a running exporter this reads without retiring anything: its
  // first snapshot finds the directory's lock held.
  auto registry = std::make_shared<SharedRegistry>(c.registry_dir, reader_options(c));
  Exposition exposition(make_collectors(c, context_for(registry)),
                        [](const std::string& e) { spdlog::error("{}", e); });
  exposition.refresh();  // one sample, no sampling thread
  std::cout << exposition.render() << std::flush;
  return 0;
}

App::App(Flags flags, const Loaded& loaded)
    : flags_(std::move(flags)),
      config_(loaded.config.config),
      web_(loaded.web.config),
      deaths_(std::make_shared<DeathLog>()) {}

App::~App() {
  stop();
}

std::unique_ptr<App> App::start(const Flags& flags, const Loaded& loaded, std::string* error) {
  std::unique_ptr<App> app(new App(flags, loaded));
  const Config& c = app->config_;
  // Before any thread of ours starts: a later setup_logging (a reload) then
  // changes the logger in place and never replaces the one that collector
  // threads log through (ThreadSanitizer saw the old one freed under them).
  setup_logging(c.log_level, c.log_format);
  app->registry_ = std::make_shared<SharedRegistry>(c.registry_dir, reader_options(c));
  // One retiring reader per directory.
  if (!app->registry_->with([&](RegistryReader& r) { return r.claim(error); })) return nullptr;
  app->exposition_ = std::make_unique<Exposition>(
      make_collectors(c, context_for(app->registry_, app->board_, app->deaths_, app->verdicts_)),
      [](const std::string& e) { spdlog::error("{}", e); });
  app->exposition_->start();
  App* self = app.get();
  HttpServer::Options http{c.listen_addresses,
                           c.systemd_socket,
                           mode_t(c.unix_socket_mode),
                           c.telemetry_path,
                           c.max_connections,
                           app->web_,
                           [self] { return self->snapshot_json(); },
                           c.max_connections_per_peer,
                           [self](const std::string& query, std::string* error) {
                             return self->deaths_json(query, error);
                           }};
  app->server_ = HttpServer::start(
      http, *app->exposition_,
      [self] {
        const std::shared_ptr<const Verdict> verdict = self->verdicts_->read();
        std::lock_guard<std::mutex> lock(self->state_mu_);
        return landing_page(self->config_, self->flags_.config_file, verdict.get());
      },
      error);
  if (!app->server_) return nullptr;
  const std::string port = std::to_string(app->server_->port());
  const std::string addresses = fmt::format("{}", fmt::join(app->server_->addresses(), " "));
  log_event(spdlog::level::info,
            fmt::format("gym-exporter {} listening on {} (port {}), telemetry path {}, registry {}",
                        kVersion, addresses, port, c.telemetry_path, c.registry_dir),
            {{"address", addresses},
             {"port", port},
             {"tls", app->web_.tls ? "true" : "false"},
             {"basic_auth", app->web_.basic_auth_users.empty() ? "false" : "true"},
             {"max_connections", std::to_string(c.max_connections)}});
  if (!c.sd.file.empty()) {
    if (!app->sd_.write(c.sd, app->server_->port(), error)) return nullptr;
    spdlog::info("service discovery: this exporter's target written to {}", c.sd.file);
  }
  return app;
}

bool App::reload() {
  const Loaded next = load(flags_);
  if (!next.ok()) {
    // Counted before it is logged: whoever reads the log line sees the count.
    SelfMetrics::process().reloaded(false);
    for (const auto& e : next.errors())
      spdlog::error("reload failed, keeping the running configuration: {}", e);
    return false;
  }
  warn_deprecations(next.config);
  apply(next.config.config, next.web.config);
  SelfMetrics::process().reloaded(true);
  spdlog::info("configuration reloaded from {}",
               flags_.config_file.empty() ? "flags" : flags_.config_file);
  return true;
}

void App::apply(Config next, const WebConfig& web) {
  WebConfig tls_only = web;
  tls_only.basic_auth_users = web_.basic_auth_users;
  if (!(tls_only == web_)) spdlog::warn("reload: TLS settings change only at restart");
  server_->set_basic_auth_users(web.basic_auth_users);
  web_.basic_auth_users = web.basic_auth_users;
  if (next.listen_addresses != config_.listen_addresses ||
      next.unix_socket_mode != config_.unix_socket_mode ||
      next.telemetry_path != config_.telemetry_path ||
      next.max_connections != config_.max_connections ||
      next.max_connections_per_peer != config_.max_connections_per_peer) {
    spdlog::warn("reload: web settings change only at restart; keeping {} {}",
                 fmt::join(config_.listen_addresses, " "), config_.telemetry_path);
    next.listen_addresses = config_.listen_addresses;
    next.unix_socket_mode = config_.unix_socket_mode;
    next.telemetry_path = config_.telemetry_path;
    next.max_connections = config_.max_connections;
    next.max_connections_per_peer = config_.max_connections_per_peer;
  }
  setup_logging(next.log_level, next.log_format);
  const bool reader_changed = !next.same_reader(config_);
  if (reader_changed || next.collectors != config_.collectors ||
      !(next.servers == config_.servers)) {
    // A new directory needs a new reader; otherwise keep it, so that the
    // totals of retired writers survive the reload. The new reader takes the
    // directory's lock at its first snapshot, after the old collectors (and
    // so the old reader) are gone, and reloads the totals file.
    if (reader_changed) {
      auto registry = std::make_shared<SharedRegistry>(next.registry_dir, reader_options(next));
      std::lock_guard<std::mutex> lock(state_mu_);
      registry_ = std::move(registry);
    }
    auto board = std::make_shared<ServerBoard>();  // the new collectors' figures
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      board_ = board;
    }
    exposition_->replace(make_collectors(next, context_for(registry_, board, deaths_, verdicts_)));
  }
  if (!(next.sd == config_.sd)) {
    std::string error;
    if (next.sd.file.empty())
      sd_.remove();
    else if (!sd_.write(next.sd, server_->port(), &error))
      spdlog::error("reload: {}; keeping the previous entry", error);
  }
  std::lock_guard<std::mutex> lock(state_mu_);
  config_ = std::move(next);
}

std::string App::snapshot_json() {
  std::shared_ptr<SharedRegistry> registry;
  std::shared_ptr<ServerBoard> board;
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    registry = registry_;
    board = board_;
    dir = config_.registry_dir;
  }
  const auto figures = board->read();
  const std::shared_ptr<const Verdict> verdict = verdicts_->read();
  return registry->with([&](RegistryReader& r) {
    return to_json(make_view(r.snapshot(), dir, figures), verdict.get());
  });
}

std::string App::deaths_json(const std::string& query, std::string* error) const {
  const auto one = [&](const char* key) {
    std::vector<std::string> v = query_values(query, key);
    return v.empty() ? std::string() : v.back();
  };
  const std::string server = one("server"), reason = one("reason"), since_text = one("since");
  double since = 0;
  if (!since_text.empty()) {
    char* end = nullptr;
    since = std::strtod(since_text.c_str(), &end);
    if (end == since_text.c_str() || *end != '\0' || !std::isfinite(since)) {
      *error = "since must be Unix seconds, not '" + since_text + "'";
      return {};
    }
  }
  if (!reason.empty() &&
      std::find(kDeathReasons.begin(), kDeathReasons.end(), reason) == kDeathReasons.end()) {
    *error = "reason must be exit_zero, exit_nonzero, signal or oom_kill, not '" + reason + "'";
    return {};
  }
  return gym::exporter::deaths_json(deaths_->records(server, since, reason),
                                    deaths_->connected() ? "connector" : "sampling");
}

void App::stop() {
  sd_.remove();  // first: Prometheus stops scraping what is going away
  if (exposition_) exposition_->stop();
  // Only an exporter that served: a start that failed captures nothing.
  if (server_ && exposition_ && !config_.final_capture_dir.empty()) {
    std::string error;
    const auto paths =
        write_final_capture(config_.final_capture_dir, *exposition_, snapshot_json(), &error);
    if (paths.empty())
      spdlog::error("{}", error);
    else
      spdlog::info("final capture written: {}", fmt::join(paths, " "));
  }
  server_.reset();
}

}  // namespace gym::exporter
